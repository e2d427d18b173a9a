"""A command job's absolute ``working_dir`` refused at submission when no cluster of the fleet
allows it (issue 23): a ``working_dir`` is relative to the run's scratch dir, or an absolute
path under a directory an admin set in a cluster's ``allowed_working_dirs`` (the fleet file),
or any directory on ``flotilla up``'s own local cluster (issue 37: where the user is; the job
enters it as its own user).
The local backend checks it again at dispatch, as the last line; ``..`` is refused by the
submission rules themselves (``api/submission.py``), on the client too."""

from __future__ import annotations

from collections.abc import Mapping

from flotilla.api.submission import absolute_working_dir_problems
from flotilla.model import JobSpec
from flotilla.server.context import ServerContext
from flotilla.server.errors import ApiError


def allowed_working_dirs(context: ServerContext) -> list[str] | None:
    """Every cluster's admin-set ``allowed_working_dirs`` together (the fleet in force), or
    None when this process cannot tell and dispatch decides: no fleet (``flotilla up``'s own
    local cluster takes any directory its job's user may enter, or those of
    ``--allow-working-dir``), a local cluster that names none (``up``'s apply) or takes any
    (``any_working_dir``), or one that gives them by a secret reference."""
    record = context.store.get_fleet()
    if record is None:
        return None
    allowed: list[str] = []
    for cluster in record.document.get("clusters", []):
        settings = cluster.get("settings") or {}
        entries = settings.get("allowed_working_dirs")
        if cluster.get("backend") == "local" and (
            entries is None or settings.get("any_working_dir") is True
        ):
            return None
        if not isinstance(entries or [], list) or not all(
            isinstance(e, str) for e in entries or []
        ):
            return None
        allowed.extend(entries or [])
    return allowed


def check_working_dirs(context: ServerContext, specs: list[JobSpec], prefixes: list[str]) -> None:
    """422 for an absolute ``working_dir`` that no cluster of the fleet allows: refused at
    submission rather than when it is dispatched (the local backend checks it again then)."""
    if not any(
        isinstance(spec.payload, Mapping) and "working_dir" in spec.payload for spec in specs
    ):
        return
    allowed = allowed_working_dirs(context)
    problems = [
        f"{prefix + '.' if prefix else ''}{line}"
        for spec, prefix in zip(specs, prefixes, strict=True)
        for line in absolute_working_dir_problems(spec, allowed)
    ]
    if problems:
        raise ApiError(422, "invalid job spec", problems)
