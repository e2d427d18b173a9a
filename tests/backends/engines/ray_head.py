"""A real local Ray head for the tests: ``ray start --head`` from the pinned ``ray`` package.

The head listens on loopback only (``--node-ip-address 127.0.0.1``), on free ports above 20000
(Ray's workers take 10002-19999 by default, and other test sessions run on this machine at the
same time), with its own ``--temp-dir``. It is stopped by the PIDs of its own processes (never
``ray stop``, which would stop every Ray on the machine). Facts measured on these machines are
in ``../shared/ENGINES.md`` (Ray section).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

START_LIMIT = 180.0
"""Seconds ``ray start`` may take, and then the head to answer on its Jobs API (about 4 s on
an idle machine, 50 s seen on a loaded one); the tests' fixture passes its own, stretched to
the machine's slowdown (``tests/timing.py``)."""

ATTEMPTS = 4
"""``ray start`` gives up when its raylet has not registered within Ray's fixed 30 s (seen at
a load average of 15-37 on 2 cores); each further attempt starts afresh on new ports."""

GLOG_PROBLEM = re.compile(r"^\[[^\]]* [EF] \d+ \d+\]")
"""An error or fatal line of Ray's C++ logs (``[2026-11-28 04:19:13,137 E 22336 22336] …``)."""

LOGS = ("raylet.out", "raylet.err", "gcs_server.out", "gcs_server.err", "dashboard.err")
"""The head's logs (under its session's ``logs/``) a failed start is explained from."""

PYTHON_PROBLEM = re.compile(r"(Error|Exception|Traceback|[Ff]ailed|timed out|refused)")

CPUS = 2
GPUS = 2
"""Ray takes ``--num-gpus`` at its word, so a machine without GPUs can test GPU requests."""
LABELS = {"flotilla.io/zone": "test-a"}
CUSTOM = {"ssd": 2.0}


def ray_executable() -> Path | None:
    """The ``ray`` CLI of this interpreter's environment (the pinned package), if installed."""
    candidate = Path(sys.executable).parent / "ray"
    if candidate.exists():
        return candidate
    found = shutil.which("ray")
    return Path(found) if found else None


def free_port(low: int = 20000, high: int = 60000) -> int:
    """A free TCP port in [low, high) on loopback (random probing: many sessions share it)."""
    import random

    for _ in range(500):
        port = random.randrange(low, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in [{low}, {high})")


def _port_block(size: int) -> int:
    """The first port of ``size`` consecutive free ports above 20000."""
    for _ in range(200):
        start = free_port(20000, 60000 - size)
        if all(_free(port) for port in range(start, start + size)):
            return start
    raise RuntimeError(f"no {size} consecutive free ports above 20000")


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class RayHead:
    """One Ray head node on this machine; ``address`` is its dashboard (Jobs API) URL."""

    def __init__(self, start_limit: float = START_LIMIT) -> None:
        # Ray's unix sockets live under the temp dir and a socket path is limited to 107
        # bytes, so it stays short (pytest's tmp_path is too long).
        self.temp_dir = Path(tempfile.mkdtemp(prefix="flray-", dir="/tmp"))
        self.dashboard_port = 0
        self.address = ""
        self.log = self.temp_dir / "ray-start.log"
        self.start_limit = start_limit
        self.gcs_port = 0
        self.failures: list[str] = []
        """Why each attempt that failed failed, in Ray's own words (``start``)."""

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            RAY_USAGE_STATS_ENABLED="0",
            # A stopped job gets SIGTERM, then SIGKILL after this many seconds.
            RAY_JOB_STOP_WAIT_TIME_S="2",
            PYTHONUNBUFFERED="1",
        )
        return env

    def start(self, attempts: int = ATTEMPTS) -> None:
        """Start the head, trying again on fresh ports and a fresh temp dir (``ATTEMPTS``).
        Fails with every attempt's reason as Ray gave it (``failures``): the error lines of
        ``ray start``'s output and of the raylet's and GCS's logs, not the tail of whatever
        it printed last (a warning, often)."""
        self.failures = []
        for attempt in range(1, attempts + 1):
            try:
                self._start_once()
                return
            except RuntimeError as error:
                self.failures.append(f"attempt {attempt} of {attempts}: {error}")
                self.stop()
                if attempt == attempts:
                    raise RuntimeError("\n\n".join(self.failures)) from None
                self.temp_dir = Path(tempfile.mkdtemp(prefix="flray-", dir="/tmp"))
                self.log = self.temp_dir / "ray-start.log"

    def _start_once(self) -> None:
        executable = ray_executable()
        if executable is None:
            raise RuntimeError("the ray CLI is not installed (uv sync --all-extras installs it)")
        block = _port_block(40)
        ports = iter(range(block, block + 40))
        self.dashboard_port = next(ports)
        gcs_port = self.gcs_port = next(ports)
        named = {
            "--node-manager-port": next(ports),
            "--object-manager-port": next(ports),
            "--dashboard-agent-grpc-port": next(ports),
            "--dashboard-agent-listen-port": next(ports),
            "--metrics-export-port": next(ports),
            "--runtime-env-agent-port": next(ports),
            "--ray-client-server-port": next(ports),
        }
        worker_low = next(ports)
        command = [
            str(executable),
            "start",
            "--head",
            "--node-ip-address",
            "127.0.0.1",
            "--port",
            str(gcs_port),
            "--dashboard-host",
            "127.0.0.1",
            "--dashboard-port",
            str(self.dashboard_port),
            "--include-dashboard",
            "true",
            "--disable-usage-stats",
            "--temp-dir",
            str(self.temp_dir),
            "--num-cpus",
            str(CPUS),
            "--num-gpus",
            str(GPUS),
            "--resources",
            json.dumps(CUSTOM),
            "--labels",
            ",".join(f"{key}={value}" for key, value in LABELS.items()),
            "--min-worker-port",
            str(worker_low),
            "--max-worker-port",
            str(block + 39),
        ]
        for flag, port in named.items():
            command += [flag, str(port)]
        with self.log.open("wb") as output:
            try:
                finished = subprocess.run(
                    command,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env=self.environment(),
                    timeout=self.start_limit,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise RuntimeError(
                    self.why(f"ray start ran past {self.start_limit:.0f}s")
                ) from None
        if finished.returncode != 0:
            raise RuntimeError(self.why(f"ray start exited {finished.returncode}"))
        self.address = f"http://127.0.0.1:{self.dashboard_port}"
        self._wait_for_jobs_api()

    def _wait_for_jobs_api(self) -> None:
        deadline = time.monotonic() + self.start_limit
        while True:
            try:
                with urllib.request.urlopen(f"{self.address}/api/jobs/", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                what = f"the head never served {self.address}/api/jobs/ in {self.start_limit:.0f}s"
                raise RuntimeError(self.why(what))
            time.sleep(0.5)

    def why(self, what: str) -> str:
        """``what`` happened, and why in Ray's words: the error lines ``ray start`` printed
        (all of its output when none looks like one) and the error lines of the logs of its
        raylet, GCS and dashboard; read before the temp dir holding them is removed."""
        printed = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        said = [line for line in printed if PYTHON_PROBLEM.search(line)] or printed
        parts = [what, "ray start printed:", *said[-20:]]
        logs = self.temp_dir / "session_latest" / "logs"
        for name in (
            "raylet.out",
            "raylet.err",
            "gcs_server.out",
            "gcs_server.err",
            "dashboard.err",
        ):
            path = logs / name
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            wrong = [line for line in lines if GLOG_PROBLEM.match(line)]
            if name.endswith(".err"):
                wrong = [line for line in lines if line.strip()]
            if wrong:
                parts += [f"{name}:", *wrong[-10:]]
        return "\n".join(parts)

    def processes(self) -> list[int]:
        """PIDs of this head's processes: every process naming its temp dir or its GCS
        (``--address=HOST:PORT``: the Ray client server, whose parent has exited and which
        names neither, outlived the tests' heads), and all their descendants (Ray renames
        its workers and dashboard modules, so their command lines no longer name the
        directory)."""
        marker = str(self.temp_dir).encode()
        gcs = f":{self.gcs_port}\0".encode() if self.gcs_port else None
        parents: dict[int, int] = {}
        roots = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            pid = int(entry.name)
            try:
                stat = (entry / "stat").read_text()
                parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
                command = (entry / "cmdline").read_bytes()
                if marker in command or (
                    gcs is not None and b"--address=" in command and gcs in command
                ):
                    roots.add(pid)
            except (OSError, ValueError, IndexError):
                continue
        found = set(roots)
        grew = True
        while grew:
            grew = False
            for pid, parent in parents.items():
                if parent in found and pid not in found:
                    found.add(pid)
                    grew = True
        return sorted(found)

    def stop(self) -> None:
        """SIGTERM this head's processes, SIGKILL what is left after 10 s; remove its dir."""
        for sig, patience in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            pids = self.processes()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + patience
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.2)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def main() -> None:
    """Start a head by hand to look at it: ``python tests/backends/engines/ray_head.py``."""
    head = RayHead()
    head.start()
    print(head.address, head.temp_dir, flush=True)
    try:
        signal.pause()
    finally:
        head.stop()


if __name__ == "__main__":
    main()
