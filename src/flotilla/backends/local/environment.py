"""What a job of the ``local`` backend gets of this machine (the submitter is not the server's
operator): a clean environment — only ``PATH``/``LANG``/``LC_ALL``/``TZ`` (``env_passthrough``),
``HOME``/``USER``/``LOGNAME`` of the user it runs as, what the job declares and the backend's
``FLOTILLA_*`` — never the server's own variables (its tokens, its database URL); a fresh
scratch directory of its own (removed when the run ends) as the base of its working dir unless
the backend's ``working_dir`` says otherwise; and an identity (``local/identity.py``). The
payload's ``working_dir`` stays inside that base: relative, without ``..``, or an absolute path
under one of the admin's ``allowed_working_dirs`` (issue 23: the server's state dir, with
other runs' logs, was one ``working_dir`` away).
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from flotilla.backends.interface import DispatchRejected, DispatchRequest, ReplicaPlacement
from flotilla.backends.local.identity import Identity, fixed_identity

DEFAULT_PASSTHROUGH = ("PATH", "LANG", "LC_ALL", "TZ")
"""The only variables of the server's environment a job sees (none of them a secret)."""

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def check_run_as(user: str | None) -> None:
    """Raise ``ValueError`` naming ``run_as`` when it names no account usable here."""
    fixed_identity(user)


def base_env(
    passthrough: Iterable[str], runs_as: Identity | None, home: Path | None
) -> dict[str, str]:
    """What a command gets of this process's environment: the passthrough list only, and the
    identity of the user it runs as (``runs_as``; ``None``: the server's own).

    A job run as another user gets the standard ``PATH``, not the server's (root's ``sbin``,
    the server's venv). A uid of its own has no account, and an account whose home is not a
    directory of its own (``nobody``: ``/nonexistent``) has none to use: its ``HOME`` is then
    ``home`` (the run's scratch dir) or ``/``, so tools that write a cache or config there
    work."""
    env = {name: os.environ[name] for name in passthrough if name in os.environ}
    env.setdefault("PATH", DEFAULT_PATH)
    if runs_as is None:
        own = pwd.getpwuid(os.getuid())
        name, directory = own.pw_name, own.pw_dir
    else:
        name, directory = runs_as.name, runs_as.home or ""
        if runs_as.uid != os.getuid():
            env["PATH"] = DEFAULT_PATH
        if not _own_directory(directory, runs_as.uid):
            directory = str(home or "/")
    env.update(HOME=directory, USER=name, LOGNAME=name)
    return env


def entering_hint(runs_as: Identity | None) -> str:
    """How to let a job's user into a working dir it could not enter (said with the refusal)."""
    if runs_as is None:
        who = "the server's user"
    elif runs_as.dynamic:
        who = f"uid {runs_as.uid} (its owner's uid on this server, without an account)"
    else:
        who = f"user {runs_as.name or runs_as.uid}"
    return (
        f"it runs as {who}, which needs search permission (x) on every directory of the path "
        "(chmod o+x DIR), and read or write on the files it uses; or start `flotilla up` as "
        "the user who owns the directory (not root): jobs then run as that user"
    )


def _own_directory(path: str, uid: int) -> bool:
    try:
        found = os.stat(path)
    except OSError:
        return False
    return stat.S_ISDIR(found.st_mode) and found.st_uid == uid


def backend_env(request: DispatchRequest, placement: ReplicaPlacement) -> dict[str, str]:
    """The ``FLOTILLA_*`` variables (and the GPUs) of one replica: set last, so a job cannot
    override them."""
    return {
        "FLOTILLA_JOB": request.job,
        "FLOTILLA_RUN": request.run_id,
        "FLOTILLA_TASK": placement.task,
        "FLOTILLA_REPLICA": str(placement.replica),
        "FLOTILLA_NODE": placement.node,
        "CUDA_VISIBLE_DEVICES": ",".join(str(device) for device in placement.gpu_ids),
    }


def make_scratch(cluster: str, run_id: str, owner: Identity | None) -> Path:
    """A fresh directory for one run (mode 0700, owned by the user it runs as), outside the
    server's state and folder; created by ``mkdtemp``, so nobody can plant it."""
    scratch = Path(tempfile.mkdtemp(prefix=f"flotilla-{cluster}-{run_id}-"))
    if owner is not None:
        os.chown(scratch, owner.uid, owner.gid)
    return scratch


def remove_scratch_dirs(cluster: str, run_id: str) -> None:
    """Remove every scratch dir ``make_scratch`` made for ``run_id``: a process that died
    while it prepared the run left one (no process of the run ever used it)."""
    prefix = f"flotilla-{cluster}-{run_id}-"
    for leftover in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        suffix = leftover.name[len(prefix) :]
        # Exactly mkdtemp's random part (8 characters, never "-"): another cluster's or
        # run's dir whose name merely starts alike is not this run's.
        if len(suffix) != 8 or "-" in suffix:
            continue
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)


def check_allowed_dirs(entries: Sequence[str | Path]) -> tuple[Path, ...]:
    """The ``allowed_working_dirs`` setting, each an absolute path; ``ValueError`` naming it."""
    allowed = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, str | Path) or not PurePosixPath(entry).is_absolute():
            raise ValueError(
                f"allowed_working_dirs[{index}]: {entry!r} must be an absolute directory"
            )
        allowed.append(Path(os.path.normpath(entry)))
    return tuple(allowed)


def check_working_dir(
    requested: str | None, allowed: Sequence[Path], anywhere: bool = False
) -> PurePosixPath | None:
    """A payload's ``working_dir`` as this backend takes it: ``None`` (none given), a relative
    path (inside the run's base dir: its scratch dir, or the backend's ``working_dir``) or an
    absolute one under an allowed dir (``anywhere``: any absolute one; the job enters it as
    its own user, which is the check). Raises ``DispatchRejected`` naming the field otherwise,
    and how to allow it."""
    if not requested:
        return None
    path = PurePosixPath(requested)
    if path.is_absolute():
        normal = PurePosixPath(os.path.normpath(requested))
        if anywhere or any(
            normal == root or root in normal.parents for root in map(PurePosixPath, allowed)
        ):
            return normal
        shown = ", ".join(str(root) for root in allowed) or "none"
        raise DispatchRejected(
            f"working_dir: {requested!r} is an absolute path; on this cluster a working_dir is "
            "relative to the run's scratch dir, or under one of the cluster's "
            f"allowed_working_dirs ({shown}); to allow it: `flotilla up --allow-working-dir "
            f"{normal}`, or add it to the cluster's allowed_working_dirs in the fleet file"
        )
    if ".." in path.parts:
        raise DispatchRejected(
            f"working_dir: {requested!r} leaves the run's scratch dir ('..'); give a path inside it"
        )
    return path
