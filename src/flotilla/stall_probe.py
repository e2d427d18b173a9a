"""Where the whole process stood still: a diagnostic for the benchmarks, off by default.

A GET that takes 100 ms on a server whose GETs take 3 ms waited for something else in the
process — the interpreter's lock held by another thread, or the garbage collector — and no
profile of the GET itself shows what. This probe is a thread that asks to wake every
millisecond; when it wakes later than ``FLOTILLA_STALL_PROBE_MS`` (default 15), whoever held
the interpreter meanwhile has just let go of it, so it writes one JSON line with how late it
was and what every other thread is doing now (its innermost frames), plus every collector
pass that ended in the meantime and how long it took::

    {"at": 1764000000.12, "late_ms": 48.1, "gc": [[2, 31.5]], "threads": {"flotilla-scheduler":
     ["flotilla/service/snapshots.py:119 observe", ...], ...}}

Armed only by the environment variable ``FLOTILLA_STALL_PROBE`` (a file path), read when
``flotilla up`` or ``flotilla serve`` starts; unset, nothing runs. The probe itself costs a
wake per millisecond, a few percent of one core: never on in production.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from pathlib import Path

ENVIRONMENT = "FLOTILLA_STALL_PROBE"
THRESHOLD_ENVIRONMENT = "FLOTILLA_STALL_PROBE_MS"
DEFAULT_THRESHOLD_MS = 15.0
TICK_SECONDS = 0.001
FRAMES = 6
"""Innermost frames kept per thread: enough to name the stretch, short enough to read."""


class StallProbe:
    """The probe thread and its collector hook; ``start`` once, ``stop`` at the end."""

    def __init__(self, path: Path, threshold_ms: float = DEFAULT_THRESHOLD_MS) -> None:
        self.path = path
        self.threshold = threshold_ms / 1000
        self._stop = threading.Event()
        self._gc_started = 0.0
        self._gc_passes: list[tuple[int, float]] = []
        self._thread = threading.Thread(target=self._run, name="flotilla-stall-probe", daemon=True)

    def start(self) -> None:
        gc.callbacks.append(self._on_gc)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: Mapping[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            took = (time.perf_counter() - self._gc_started) * 1000
            self._gc_passes.append((info["generation"], round(took, 2)))

    def _run(self) -> None:
        me = threading.get_ident()
        with self.path.open("a", encoding="utf-8") as out:
            expected = time.perf_counter() + TICK_SECONDS
            cpu = time.process_time()
            while not self._stop.is_set():
                time.sleep(TICK_SECONDS)
                woke = time.perf_counter()
                used = time.process_time() - cpu
                passes, self._gc_passes = self._gc_passes, []
                late = woke - expected
                if late > self.threshold or any(ms >= self.threshold * 1000 for _, ms in passes):
                    line = self._line(late, passes, me)
                    line["cpu_ms"] = round(used * 1000, 1)
                    out.write(json.dumps(line) + "\n")
                    out.flush()
                expected = time.perf_counter() + TICK_SECONDS
                cpu = time.process_time()

    def _line(self, late: float, passes: list[tuple[int, float]], me: int) -> dict[str, object]:
        names = {thread.ident: thread.name for thread in threading.enumerate()}
        threads = {
            names.get(ident, str(ident)): [
                f"{_short(frame.filename)}:{frame.lineno} {frame.name}"
                for frame in traceback.extract_stack(stack)[-FRAMES:]
            ]
            for ident, stack in sys._current_frames().items()
            if ident != me
        }
        return {
            "at": round(time.time(), 3),
            "late_ms": round(late * 1000, 1),
            "gc": [pass_ for pass_ in passes if pass_[1] >= 1.0],
            "threads": threads,
        }


def _short(filename: str) -> str:
    """A frame's file from its package on (``flotilla/…``, ``starlette/…``)."""
    parts = Path(filename).parts
    for anchor in ("site-packages", "src"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + 1 :])
    return filename


def start_if_armed() -> StallProbe | None:
    """Start the probe if ``FLOTILLA_STALL_PROBE`` names a file; else do nothing."""
    path = os.environ.get(ENVIRONMENT)
    if not path:
        return None
    threshold = float(os.environ.get(THRESHOLD_ENVIRONMENT) or DEFAULT_THRESHOLD_MS)
    probe = StallProbe(Path(path), threshold)
    probe.start()
    return probe
