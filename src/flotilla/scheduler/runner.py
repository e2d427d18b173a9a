"""Armada's asynchronous scheduling runner: the algorithm runs beside the main loop.

State machine: ``Idle → RunRequested → Running → ResultReady → Idle``. The main loop
``trigger``s a round on a snapshot only when the runner is idle (Armada: only after a clean
commit), keeps applying state transitions while the round is in flight, and ``take_result``s
it once ready, to reconcile and commit. ``reset`` — on every leadership change — cancels an
in-flight round, waits until it has stopped and discards its result, so a new leader never
commits decisions computed by an old one.

Two executors share the state machine: ``ThreadExecutor`` (the service: a background thread)
and ``InlineExecutor`` (the simulator: the round completes inside ``trigger``, deterministic).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Protocol

from flotilla.framework.snapshot import CycleResult, SchedulingSnapshot


class RoundCancelled(Exception):
    """Raised inside a round whose runner was reset; the result is discarded."""


ScheduleFunction = Callable[[SchedulingSnapshot, threading.Event], CycleResult]
"""Runs the algorithm; should check the event now and then and raise ``RoundCancelled``."""


class RunnerState(StrEnum):
    IDLE = "idle"
    RUN_REQUESTED = "run-requested"
    RUNNING = "running"
    RESULT_READY = "result-ready"


class Executor(Protocol):
    def start(self, work: Callable[[], None]) -> None: ...

    def join(self) -> None: ...


class InlineExecutor:
    """Runs the work at once, in the caller's thread."""

    def start(self, work: Callable[[], None]) -> None:
        work()

    def join(self) -> None:
        """Nothing is ever in flight."""


class ThreadExecutor:
    """Runs the work in a daemon thread; ``join`` waits for it."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None

    def start(self, work: Callable[[], None]) -> None:
        self._thread = threading.Thread(target=work, name="flotilla-scheduling-round", daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()


class AsyncSchedulingRunner:
    def __init__(
        self,
        schedule: ScheduleFunction,
        executor: Executor | None = None,
        on_duration: Callable[[float], None] | None = None,
    ) -> None:
        self._schedule = schedule
        self._executor = executor or ThreadExecutor()
        self._on_duration = on_duration
        self._lock = threading.Lock()
        self._state = RunnerState.IDLE
        self._result: CycleResult | None = None
        self._error: BaseException | None = None
        self._cancel = threading.Event()
        self._generation = 0

    @property
    def state(self) -> RunnerState:
        with self._lock:
            return self._state

    def trigger(self, snapshot: SchedulingSnapshot) -> bool:
        """Start a round on ``snapshot`` if idle; False (and nothing happens) otherwise."""
        with self._lock:
            if self._state is not RunnerState.IDLE:
                return False
            self._state = RunnerState.RUN_REQUESTED
            self._cancel = threading.Event()
            generation = self._generation
            cancel = self._cancel

        def work() -> None:
            with self._lock:
                if generation != self._generation:
                    return
                self._state = RunnerState.RUNNING
            started = time.perf_counter()
            result: CycleResult | None = None
            error: BaseException | None = None
            try:
                result = self._schedule(snapshot, cancel)
            except RoundCancelled:
                pass
            except BaseException as failure:  # reported to the main loop by take_result
                error = failure
            if self._on_duration is not None:
                self._on_duration(time.perf_counter() - started)
            with self._lock:
                if generation != self._generation:
                    return
                if result is None and error is None:
                    self._state = RunnerState.IDLE
                    return
                self._result, self._error = result, error
                self._state = RunnerState.RESULT_READY

        self._executor.start(work)
        return True

    def take_result(self) -> CycleResult | None:
        """The finished run's result (the runner goes back to idle), or None if not ready.

        A round that failed re-raises its error here, in the main loop.
        """
        with self._lock:
            if self._state is not RunnerState.RESULT_READY:
                return None
            result, error = self._result, self._error
            self._result = self._error = None
            self._state = RunnerState.IDLE
        if error is not None:
            raise error
        return result

    def peek(self) -> CycleResult | None:
        """The ready result without taking it (None while idle or running)."""
        with self._lock:
            return self._result if self._state is RunnerState.RESULT_READY else None

    def reset(self) -> None:
        """Cancel any round in flight, wait for it to stop, discard its result; back to idle."""
        with self._lock:
            self._generation += 1
            self._cancel.set()
        self._executor.join()
        with self._lock:
            self._state = RunnerState.IDLE
            self._result = self._error = None
