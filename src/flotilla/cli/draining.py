"""What ``flotilla up`` says and does once it is asked to stop (Ctrl-C, SIGTERM).

Without ``--drain`` the API and the scheduler stop and running jobs keep running: their
processes are supervised apart from the server (other backends' jobs run on their cluster),
and the next ``flotilla up`` over the same database adopts them. With ``--drain`` the
scheduler starts no new job and follows the running ones to their end first, while the API
keeps answering (``Drain``: the server runs it on a thread at the first signal); a second
Ctrl-C stops waiting.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

import typer

if TYPE_CHECKING:  # the store loads SQLAlchemy: only ``flotilla up`` needs it, not the CLI
    from flotilla.store import Store

POLL_SECONDS = 0.5


class Drainable(Protocol):
    """The scheduling loop, as far as stopping is concerned."""

    def drain(self) -> None:
        """Start no new job; keep following the running ones."""
        ...


def active_jobs(store: Store) -> int:
    """Jobs leased, pending or running, in every queue."""
    from flotilla.store import ACTIVE_JOB_STATES

    active = {state.value for state in ACTIVE_JOB_STATES}
    return sum(
        count
        for states in store.job_counts().values()
        for state, count in states.items()
        if state in active
    )


class Drain:
    """``--drain`` with an API: ``run`` (on the server's thread) waits for the running jobs
    while the API answers; ``started``/``done`` tell ``flotilla up`` what is left to say."""

    def __init__(self, store: Store, loop: Drainable) -> None:
        self.store, self.loop = store, loop
        self.started = False
        self.done = False

    def run(self, interrupted: threading.Event) -> None:
        self.started = True
        shut_down(self.store, self.loop, True, interrupted)
        self.done = not interrupted.is_set()


def shut_down(
    store: Store, loop: Drainable, drain: bool, interrupted: threading.Event | None = None
) -> None:
    """Say what happens to the running jobs; with ``drain``, wait for them to end (until
    Ctrl-C, or until ``interrupted`` is set)."""
    running = active_jobs(store)
    if not drain:
        if running:
            typer.echo(
                f"stopping: {running} running job(s) keep running and the next `flotilla up` "
                "over this database picks them up (start with --drain to wait for them instead)"
            )
        return
    loop.drain()
    if not running:
        typer.echo("draining: no job is running; stopping")
        return
    typer.echo(
        f"draining: no new job starts; waiting for {running} running job(s) to end "
        "(Ctrl-C again stops now and leaves them running)"
    )
    stop = interrupted or threading.Event()
    try:
        while running:
            if stop.wait(POLL_SECONDS):
                raise KeyboardInterrupt
            left = active_jobs(store)
            if left != running:
                typer.echo(f"draining: {left} job(s) still running")
            running = left
    except KeyboardInterrupt:
        typer.echo(f"stopping without waiting: {running} job(s) keep running")
        return
    typer.echo("drained: every job has ended; stopping")
