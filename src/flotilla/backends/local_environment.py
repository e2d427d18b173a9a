"""What a job of the ``local`` backend gets of this machine (the submitter is not the server's
operator): a clean environment — only ``PATH``/``LANG``/``LC_ALL``/``TZ`` (``env_passthrough``),
``HOME``/``USER``/``LOGNAME`` of the user it runs as, what the job declares and the backend's
``FLOTILLA_*`` — never the server's own variables (its tokens, its database URL); a fresh
scratch directory of its own as working dir (removed when the run ends) unless the backend's
``working_dir`` or the payload says otherwise; and, with ``run_as``, another user's identity
(the supervisor stays the server's user, so the job cannot forge its outcome or touch the
state dir, which is mode 0700).
"""

from __future__ import annotations

import os
import pwd
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from flotilla.backends.interface import DispatchRequest, ReplicaPlacement

DEFAULT_PASSTHROUGH = ("PATH", "LANG", "LC_ALL", "TZ")
"""The only variables of the server's environment a job sees (none of them a secret)."""

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def account(user: str | None) -> pwd.struct_passwd | None:
    """The account ``run_as`` names; raises ``ValueError`` naming the setting."""
    if user is None:
        return None
    try:
        found = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        raise ValueError(f"run_as: no such user {user!r} on this machine") from None
    if found.pw_uid != os.getuid() and os.geteuid() != 0:
        raise ValueError(
            f"run_as: running commands as {found.pw_name!r} needs the server to run as root"
        )
    return found


def check_run_as(user: str | None) -> None:
    """Raise ``ValueError`` naming ``run_as`` when it names no account usable here."""
    account(user)


def base_env(
    passthrough: Iterable[str],
    runs_as: pwd.struct_passwd | None,
    spare_home: Path | None = None,
) -> dict[str, str]:
    """What a command gets of this process's environment: the passthrough list only, and the
    identity of the user it runs as (``runs_as``; ``None``: the server's own).

    A job run as another user (a root server's jobs run as ``nobody``) gets the standard
    ``PATH``, not the server's (root's ``sbin``, the server's venv); and a user whose home is
    not a directory of its own (``nobody``: ``/nonexistent``) gets ``spare_home`` (the run's
    working dir) as ``HOME``, so tools that write a cache or a config there work."""
    env = {name: os.environ[name] for name in passthrough if name in os.environ}
    env.setdefault("PATH", DEFAULT_PATH)
    identity = runs_as or pwd.getpwuid(os.getuid())
    if identity.pw_uid != os.getuid() and "PATH" in env:
        env["PATH"] = DEFAULT_PATH
    home = identity.pw_dir
    if spare_home is not None and not _own_directory(home, identity.pw_uid):
        home = str(spare_home)
    env.update(HOME=home, USER=identity.pw_name, LOGNAME=identity.pw_name)
    return env


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


def make_scratch(cluster: str, run_id: str, owner: pwd.struct_passwd | None) -> Path:
    """A fresh directory for one run (mode 0700, owned by the user it runs as), outside the
    server's state and folder; created by ``mkdtemp``, so nobody can plant it."""
    scratch = Path(tempfile.mkdtemp(prefix=f"flotilla-{cluster}-{run_id}-"))
    if owner is not None:
        os.chown(scratch, owner.pw_uid, owner.pw_gid)
    return scratch
