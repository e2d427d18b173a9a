"""What ``flotilla up`` says and does once it is asked to stop (Ctrl-C, SIGTERM).

Without ``--drain`` the API and the scheduler stop and running jobs keep running: their
processes are supervised apart from the server (other backends' jobs run on their cluster),
and the next ``flotilla up`` over the same database adopts them. With ``--drain`` the
scheduler starts no new job and follows the running ones to their end first; a second Ctrl-C
stops waiting.
"""

from __future__ import annotations

import time
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


def shut_down(store: Store, loop: Drainable, drain: bool) -> None:
    """Say what happens to the running jobs; with ``drain``, wait for them to end."""
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
    try:
        while running:
            time.sleep(POLL_SECONDS)
            left = active_jobs(store)
            if left != running:
                typer.echo(f"draining: {left} job(s) still running")
            running = left
    except KeyboardInterrupt:
        typer.echo(f"stopping without waiting: {running} job(s) keep running")
        return
    typer.echo("drained: every job has ended; stopping")
