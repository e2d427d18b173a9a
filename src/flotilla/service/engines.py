"""Engines at arm's length: every call to a cluster's backend runs on that cluster's own
workers, with a timeout and a backoff of its own, so that a slow, black-holed (it accepts a
connection and never answers) or refusing engine costs the other clusters nothing.

``ClusterEngine`` wraps one ``Backend`` and is one itself, so the loop, the API and the
fleet's startup keep calling the Backend protocol (the composition root wraps every backend;
nothing in the domain code knows). Two workers (threads) per cluster: one *watches*
(``inventory`` and ``poll``, whose answers are kept: the round reads the last known
inventory and drains the statuses gathered since), one runs *commands* (``dispatch``,
``cancel``, ``status``, ``logs``, ``add_replicas``). A caller waits at most
``answer_within`` (``probe_within`` for a probe of an unreachable cluster) for an answer; a
command not answered by then raises ``NoAnswerYet`` (a ``BackendUnavailable``: the callers
already retry those next pass) and goes on on the worker; its answer wakes the loop
(``on_late_answer``), whose repeat of the same (idempotent) request collects the outcome.
While one call of a worker is late, the others do not wait at all.

A call that takes longer than ``timeout``, or a refresh that raises ``BackendUnavailable``,
makes the cluster *unreachable* (a command's ``BackendUnavailable`` goes to its caller only):
one log line (the error's first line, no traceback), then every call fails at once with
``ClusterUnreachable`` without touching the network, and only a probe (the watch
worker's refresh, waited for ``probe_within``) asks the engine again, after a bounded
exponential backoff. The first answer makes it reachable again, with one line. A worker
stuck in a call that never returns is abandoned (it ends when its call does) and a new one
takes its place, at most ``MAX_ABANDONED`` per worker at a time: an engine that swallowed
that many calls for good (a client with no timeout of its own) is asked no more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from flotilla.backends.interface import (
    Backend,
    BackendClosed,
    BackendUnavailable,
    CancelRequest,
    CancelResult,
    DispatchRequest,
    DispatchResult,
    Inventory,
    LogChunk,
    LogsRequest,
    RunBusy,
    RunStatus,
    StatusRequest,
    can_grow,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_ABANDONED = 2
"""Threads of one worker left in a call that did not return in time; beyond this no new one
is started until one of them returns (a black hole costs a bounded number of threads)."""

KEEP_OUTCOME_SECONDS = 60.0
"""How long the outcome of a command nobody collected is kept for its repeat."""

FRESH_SECONDS = 1.0
"""How old a read's uncollected answer (a run's status, a chunk of logs) may be and still
answer its repeat; an older one is asked again."""


@dataclass(frozen=True)
class EngineSettings:
    """How far the service keeps each cluster's engine (``flotilla up`` defaults)."""

    answer_within: float = 0.1
    """The longest a caller (the round, an API request) waits for an engine's answer: a
    local engine answers in milliseconds; a slower one's answer is read a pass later."""
    probe_within: float = 0.02
    """The longest a caller waits for a probe of an unreachable cluster (a refusing engine
    answers at once; a black hole costs the round this, once per backoff)."""
    timeout: float = 10.0
    """A call still running after this makes its cluster unreachable."""
    backoff: float = 1.0
    """The first wait before an unreachable cluster is asked again; doubled each failure."""
    max_backoff: float = 30.0
    """The longest wait between two probes of an unreachable cluster."""


class ClusterUnreachable(BackendUnavailable):
    """The cluster is known unreachable: the call was not made (the change was logged once).
    Its text is why (the engine's last error, or the timeout it overran)."""


class NoAnswerYet(BackendUnavailable):
    """The call goes on on the cluster's worker; ask again (idempotently) for its outcome."""


def first_line(error: BaseException, limit: int = 200) -> str:
    """An error as one short line (a connection error's text can run to several)."""
    text = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def level_of(error: BaseException) -> int:
    """The log level of a call's failure that its caller retries: debug for an engine's
    expected silence (its cluster's reachability line said it once), else a warning."""
    return logging.DEBUG if isinstance(error, ClusterUnreachable | NoAnswerYet) else logging.WARNING


class _Call:
    """One call to run on a worker; its outcome once ``done`` is set."""

    __slots__ = (
        "done",
        "error",
        "finished",
        "function",
        "judges",
        "news",
        "result",
        "started",
        "unclaimed",
    )

    def __init__(
        self,
        function: Callable[[], Any],
        news: Callable[[Any], bool] = lambda _: True,
        *,
        judges: bool = False,
    ) -> None:
        self.function = function
        self.judges = judges
        """Whether its ``BackendUnavailable`` makes the cluster unreachable: a refresh's (the
        cluster's heartbeat) does; a command's goes to its caller only (a backend may refuse
        one request so, and the next refresh tells whether the engine is down)."""
        self.news = news
        """Whether a result is worth waking the loop for when it comes late."""
        self.unclaimed = False
        """Its caller stopped waiting: its outcome wakes the loop (``on_late_answer``)."""
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.started: float | None = None
        self.finished: float | None = None

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


class _Worker:
    """One thread running calls in order; replaced (the old one abandoned) when a call hangs."""

    def __init__(
        self, name: str, on_end: Callable[[_Call], None], clock: Callable[[], float]
    ) -> None:
        self._name = name
        self._on_end = on_end
        self._clock = clock
        self._lock = threading.Condition()
        self._queue: deque[_Call] = deque()
        self._current: _Call | None = None
        self._generation = 0
        self._running = False
        self._abandoned = 0
        self._closed = False

    def submit(self, call: _Call) -> bool:
        """Queue ``call``; False when no thread can take it (too many abandoned, closed)."""
        with self._lock:
            if self._closed:
                return False
            if not self._running:
                if self._abandoned >= MAX_ABANDONED:
                    return False
                self._running = True
                threading.Thread(
                    target=self._work, args=(self._generation,), name=self._name, daemon=True
                ).start()
            self._queue.append(call)
            self._lock.notify()
            return True

    def late(self, now: float, after: float) -> bool:
        """Whether the call in progress started more than ``after`` seconds ago."""
        current = self._current
        return current is not None and current.started is not None and now - current.started > after

    def abandon(self) -> list[_Call]:
        """Leave the thread to its hung call; the calls queued behind it, to fail."""
        with self._lock:
            self._generation += 1
            if self._running:
                self._running = False
                self._abandoned += 1
            self._current = None
            dropped = list(self._queue)
            self._queue.clear()
            return dropped

    def close(self) -> list[_Call]:
        with self._lock:
            self._closed = True
            self._generation += 1
            dropped = list(self._queue)
            self._queue.clear()
            self._lock.notify_all()
            return dropped

    def _work(self, generation: int) -> None:
        while True:
            with self._lock:
                while not self._queue and generation == self._generation and not self._closed:
                    self._lock.wait()
                if generation != self._generation or self._closed:
                    if generation == self._generation:
                        self._running = False
                    return
                call = self._queue.popleft()
                call.started = self._clock()
                self._current = call
            try:
                call.result = call.function()
            except BaseException as error:  # handed to the caller, whatever it is
                call.error = error
            call.finished = self._clock()
            self._on_end(call)
            call.done.set()
            with self._lock:
                if generation != self._generation:  # abandoned meanwhile: its successor runs
                    self._abandoned -= 1
                    return
                self._current = None


class ClusterEngine:
    """One cluster's backend at arm's length (module docstring). Implements ``Backend`` and,
    when the backend can grow runs, ``ReplicaGrowth``."""

    def __init__(
        self,
        backend: Backend,
        settings: EngineSettings | None = None,
        *,
        owns: bool = True,
        clock: Callable[[], float] = time.monotonic,
        on_late_answer: Callable[[], None] | None = None,
    ) -> None:
        """``owns``: ``close`` closes ``backend`` too (False for backends a caller made).
        ``on_late_answer``: called when an answer comes after its caller stopped waiting
        (the loop's ``wake``: it reads the answer at once, not a cycle later)."""
        self.inner = backend
        self.on_late_answer = on_late_answer
        self.name = backend.name
        self.cluster = backend.cluster
        self.settings = settings or EngineSettings()
        self._owns = owns
        self._clock = clock
        self._lock = threading.Lock()
        """Guards the reachability and the commands asked."""
        self._watching = threading.Lock()
        """Guards the refresh and what it brought (the loop's and the API's threads ask)."""
        self._watch = _Worker(f"engine-watch-{backend.cluster}", self._ended, clock)
        self._commands = _Worker(f"engine-commands-{backend.cluster}", self._ended, clock)
        self.reachable = True
        self._failures = 0
        self._next_probe = float("-inf")
        self._why = ""
        self._inventory: Inventory | None = None
        self._statuses: list[RunStatus] = []
        self._refresh: _Call | None = None
        self._collected = True
        """Whether the statuses of the last refresh were drained by ``poll`` already."""
        self._pending: dict[Hashable, _Call] = {}
        """Commands asked and not collected yet, by request: a repeat waits for (or takes)
        the same call's outcome instead of asking the engine again."""

    def __repr__(self) -> str:
        return f"ClusterEngine({self.inner!r})"

    @property
    def grows(self) -> bool:
        """Whether the wrapped backend can add replicas to a running run (``can_grow``)."""
        return can_grow(self.inner)

    # --- reachability -------------------------------------------------------------------

    def _ended(self, call: _Call) -> None:
        """A call returned (on its worker): the engine answered, or said it cannot."""
        error = call.error
        if isinstance(error, BackendUnavailable) and not isinstance(error, RunBusy | NoAnswerYet):
            if call.judges and not isinstance(error, BackendClosed):
                self._failed(first_line(error))
        else:
            self._answered()
        late = call.unclaimed and error is None and self.on_late_answer is not None
        if late and call.news(call.result):
            assert self.on_late_answer is not None
            self.on_late_answer()

    def _failed(self, why: str) -> None:
        with self._lock:
            self._why = why
            delay = min(self.settings.max_backoff, self.settings.backoff * 2**self._failures)
            self._failures += 1
            self._next_probe = self._clock() + delay
            if not self.reachable:
                return
            self.reachable = False
        log.warning(
            "cluster %s is unreachable: %s (asked again every %g s at most)",
            self.cluster,
            why,
            self.settings.max_backoff,
        )

    def _answered(self) -> None:
        with self._lock:
            self._failures = 0
            if self.reachable:
                return
            self.reachable = True
        log.warning("cluster %s answers again", self.cluster)

    def _check_late(self) -> None:
        """A call past its timeout: the cluster is unreachable, its worker replaced."""
        now = self._clock()
        timeout = self.settings.timeout
        for worker in (self._watch, self._commands):
            if worker.late(now, timeout):
                dropped = worker.abandon()
                self._failed(f"no answer in {timeout:g} s")
                with self._lock:
                    for key, call in list(self._pending.items()):
                        if not call.done.is_set():
                            del self._pending[key]
                with self._watching:
                    if self._refresh is not None and not self._refresh.done.is_set():
                        self._refresh = None
                for call in dropped:
                    call.error = self._unreachable()
                    call.done.set()

    def _unreachable(self) -> ClusterUnreachable:
        return ClusterUnreachable(self._why)

    # --- watching: inventory and poll from the last refresh -------------------------------

    def _refreshed(self, poll_only: bool) -> tuple[Inventory | None, list[RunStatus]]:
        inventory = None if poll_only else self.inner.inventory()
        return inventory, self.inner.poll()

    def _take_refresh(self) -> None:
        """Keep what a finished refresh brought (under ``_watching``)."""
        refresh = self._refresh
        if refresh is None or not refresh.done.is_set():
            return
        self._refresh = None
        if refresh.error is not None:
            if isinstance(refresh.error, BackendUnavailable):
                return  # said by the reachability line; the next refresh asks again
            raise refresh.error
        inventory, statuses = refresh.result
        if inventory is not None:
            self._inventory = inventory
        self._statuses.extend(statuses)
        self._collected = False

    def _kick(self, poll_only: bool) -> None:
        """Start a refresh unless one is in flight; wait for it while the cluster answers."""
        self._check_late()
        with self._watching:
            self._take_refresh()
            refresh = self._refresh
            wait = self.settings.answer_within if self.reachable else self.settings.probe_within
            if refresh is None:
                if not self.reachable and self._clock() < self._next_probe:
                    return
                # A late refresh wakes the loop only if runs changed: a slow engine with
                # nothing new must not make the loop cycle at its pace.
                refresh = _Call(
                    lambda: self._refreshed(poll_only), lambda result: bool(result[1]), judges=True
                )
                if not self._watch.submit(refresh):
                    return
                self._refresh = refresh
        if not self._watch.late(self._clock(), wait) and not refresh.done.wait(wait):
            refresh.unclaimed = True  # what it brings wakes the loop
        with self._watching:
            self._take_refresh()

    def ask(self) -> threading.Event | None:
        """Start a refresh now unless one is in flight or a probe is not due (what ``done``
        is set on when it ends; None: none)."""
        self._check_late()
        with self._watching:
            self._take_refresh()
            if self._refresh is None:
                if not self.reachable and self._clock() < self._next_probe:
                    return None
                refresh = _Call(
                    lambda: self._refreshed(False), lambda result: bool(result[1]), judges=True
                )
                if not self._watch.submit(refresh):
                    return None
                self._refresh = refresh
            return self._refresh.done

    def inventory(self) -> Inventory:
        """The last inventory the engine gave, refreshed first if it answers in time."""
        self._kick(poll_only=False)
        if not self.reachable:
            raise self._unreachable()
        if self._inventory is None:
            raise NoAnswerYet(f"cluster {self.cluster} has not answered yet")
        return self._inventory

    def poll(self) -> list[RunStatus]:
        """The statuses gathered since the last ``poll`` (a refresh first, unless the one an
        ``inventory`` just made is not drained yet)."""
        if self._collected:
            self._kick(poll_only=True)
        with self._watching:
            self._take_refresh()
            statuses, self._statuses = self._statuses, []
            self._collected = True
        if not statuses and not self.reachable:
            raise self._unreachable()
        return statuses

    # --- commands -------------------------------------------------------------------------

    def _command(
        self,
        key: Hashable,
        function: Callable[[], T],
        *,
        reuse: float,
        wait: float | None = None,
    ) -> T:
        """Run ``function`` on the command worker and wait for it (``wait``, by default
        ``answer_within``). A repeat of the same request while it runs waits for that call;
        once it finished, a repeat takes its outcome if it is at most ``reuse`` seconds old
        (a mutation, idempotent: long; a read: only fresh), else asks again."""
        self._check_late()
        now = self._clock()
        with self._lock:
            for old, kept in list(self._pending.items()):
                if kept.finished is not None and now - kept.finished > KEEP_OUTCOME_SECONDS:
                    del self._pending[old]
            call = self._pending.get(key)
            if call is not None and call.finished is not None and now - call.finished > reuse:
                del self._pending[key]
                call = None
            if call is None:
                if not self.reachable:
                    raise self._unreachable()
                call = self._pending[key] = _Call(function)
                if not self._commands.submit(call):
                    del self._pending[key]
                    raise self._unreachable()
        if wait is None:
            late = self._commands.late(self._clock(), self.settings.answer_within)
            wait = 0.0 if late else self.settings.answer_within
        if not call.done.wait(wait):
            call.unclaimed = True  # its outcome wakes the loop, which asks again
            if not call.done.is_set():
                raise NoAnswerYet(f"cluster {self.cluster}: no answer yet, asked again next pass")
        with self._lock:
            if self._pending.get(key) is call:
                del self._pending[key]
        return call.outcome()  # type: ignore[no-any-return]

    def dispatch(self, request: DispatchRequest) -> DispatchResult:
        return self._command(
            ("dispatch", request.run_id),
            lambda: self.inner.dispatch(request),
            reuse=KEEP_OUTCOME_SECONDS,
        )

    def add_replicas(self, request: DispatchRequest) -> DispatchResult:
        grow = getattr(self.inner, "add_replicas", None)
        if grow is None:
            raise NotImplementedError(f"backend {self.name} cannot add replicas to a run")
        key = ("grow", request.run_id, len(request.placements))
        result: DispatchResult = self._command(
            key, lambda: grow(request), reuse=KEEP_OUTCOME_SECONDS
        )
        return result

    def cancel(self, request: CancelRequest) -> CancelResult:
        return self._command(
            ("cancel", request.run_id),
            lambda: self.inner.cancel(request),
            reuse=KEEP_OUTCOME_SECONDS,
        )

    def status(self, request: StatusRequest, *, wait: float | None = None) -> RunStatus:
        """``wait``: how long to wait for the answer (default ``answer_within``; a person's
        request, through ``patient_status``, waits up to the timeout)."""
        return self._command(
            ("status", request.run_id),
            lambda: self.inner.status(request),
            reuse=FRESH_SECONDS,
            wait=wait,
        )

    def logs(self, request: LogsRequest) -> LogChunk:
        """Only a person asks (the API, never the round): waits up to the call's timeout."""
        return self._command(
            ("logs", request),
            lambda: self.inner.logs(request),
            reuse=FRESH_SECONDS,
            wait=self.settings.timeout,
        )

    def close(self) -> None:
        """Stop the workers (a hung call's thread ends with its call); close the backend if
        this object owns it."""
        for worker in (self._watch, self._commands):
            for call in worker.close():
                call.error = BackendClosed(f"cluster {self.cluster}: closed")
                call.done.set()
        if self._owns:
            self.inner.close()

    def __getattr__(self, name: str) -> Any:
        """Anything else a backend offers (its settings, ``address``…), read from it."""
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def patient_status(backend: Backend, request: StatusRequest) -> RunStatus:
    """A run's status for a request a person waits on (the API's engine ids): up to the
    engine's timeout, not the round's ``answer_within``."""
    if isinstance(backend, ClusterEngine):
        return backend.status(request, wait=backend.settings.timeout)
    return backend.status(request)


def unwrapped(backend: Backend) -> Backend:
    """The backend itself, whether or not it is kept at arm's length."""
    return backend.inner if isinstance(backend, ClusterEngine) else backend


def at_arms_length(
    backends: Mapping[str, Backend], settings: EngineSettings, *, owns: bool
) -> dict[str, Backend]:
    """Each backend of ``backends`` wrapped in a ``ClusterEngine`` of its own."""
    return {name: ClusterEngine(backend, settings, owns=owns) for name, backend in backends.items()}


def wake_on_late_answers(backends: Mapping[str, Backend], wake: Callable[[], None]) -> None:
    """Have each engine of ``backends`` call ``wake`` when an answer comes late."""
    for backend in backends.values():
        if isinstance(backend, ClusterEngine):
            backend.on_late_answer = wake


def engines_of(backends: Mapping[str, Backend]) -> Iterator[Backend]:
    """The backends themselves behind ``backends`` (for type checks of what they are)."""
    return (unwrapped(backend) for backend in backends.values())


def first_answers(backends: Mapping[str, Backend], seconds: float) -> None:
    """Ask every engine of ``backends`` at once and wait up to ``seconds`` in all for their
    answers: at start (``FleetRuntime.connect``), so that an engine slow to make its first
    connection (Ray's client) is not reported unreachable; a black hole delays the start by
    ``seconds``, once."""
    asked = [
        done
        for backend in backends.values()
        if isinstance(backend, ClusterEngine) and (done := backend.ask()) is not None
    ]
    deadline = time.monotonic() + seconds
    for done in asked:
        done.wait(max(0.0, deadline - time.monotonic()))
