"""A batch's own ``/tmp``, ``/dev/shm`` and ``/proc`` (issue 35): set up by its supervisor, PID
1 of the batch's PID namespace, in a mount namespace of its own, before it starts a command.
Standard library only (imported by path, like ``_job_init``).

- ``/tmp`` and ``/dev/shm`` are fresh ``tmpfs`` mounts (mode 1777, ``nosuid``, ``nodev``):
  what a job writes there is charged to the memory cgroup of the replica that wrote it, so it
  counts in its ``memory`` request (and the mount is sized to the batch's requests when each
  replica has one), and it is gone when the batch's last process is: the mount namespace, and
  its tmpfs, end with the PID namespace. Formerly eight jobs of 128Mi left 922 MiB in the
  host's ``/dev/shm``.
- The directories under them that the batch needs (its scratch dir, its working dir, the
  run's directory with the logs and exit files: ``keep``) are bind-mounted back at their
  paths: each by its entry right below ``/tmp`` (``/tmp/flotilla-local-RUN-x``, a run's
  scratch dir), so every directory below keeps its owner and mode, and nothing else of the
  host's ``/tmp`` is seen.
- ``/proc`` is the PID namespace's own: a job sees the processes of its batch, not every
  tenant's command lines. The supervisor still needs the host's (a command's pid as the
  server sees it, ``_spawn._host_pid``; its start time, ``_job_init.start_ticks``): it keeps
  a descriptor of it (close-on-exec, so no command inherits it), through which
  ``_job_init.PROC`` then reads.

Mounts made here never reach the host: ``/`` is made private (recursively) first.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

CLONE_NEWNS = 0x00020000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

PRIVATE = ("/tmp", "/dev/shm")
"""The shared writable places each batch gets its own of."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str = "") -> None:
    libc = _libc()
    result = libc.mount(
        None if source is None else os.fsencode(source),
        os.fsencode(target),
        None if kind is None else kind.encode(),
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"mount {target}: {os.strerror(number)}")


def _existing(path: str) -> str | None:
    """``path``, or its nearest ancestor that exists (a working dir made at start)."""
    while path and path != "/":
        if os.path.isdir(path):
            return path
        path = os.path.dirname(path)
    return None


def _top(path: str, place: str) -> str | None:
    """The entry right below ``place`` that holds ``path`` (``/tmp/a`` for ``/tmp/a/b``), or
    ``None`` when ``path`` is not below ``place``."""
    if not path.startswith(place + "/"):
        return None
    return os.path.join(place, path[len(place) + 1 :].split("/", 1)[0])


def set_up(keep: Sequence[str], size: int | None) -> int:
    """Enter a mount namespace of this process's own with private ``/tmp``, ``/dev/shm`` (of
    ``size`` bytes each, when given) and ``/proc``; the descriptor of the host's ``/proc``.
    Raises ``OSError`` when the kernel refuses (the caller then goes on without them)."""
    if _libc().unshare(CLONE_NEWNS) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"unshare(CLONE_NEWNS): {os.strerror(number)}")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    host_proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    options = "mode=1777" + (f",size={size}" if size else "")
    for place in PRIVATE:
        if not os.path.isdir(place):
            continue
        found = [existing for path in keep if (existing := _existing(path)) is not None]
        tops = {_top(path, place) for path in found}
        held = [
            (top, os.open(top, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
            for top in sorted(top for top in tops if top is not None)
        ]
        _mount("tmpfs", place, "tmpfs", MS_NOSUID | MS_NODEV, options)
        for top, descriptor in held:
            try:
                os.mkdir(top, 0o700)  # a mount point: the bound directory's mode applies
                _mount(f"/proc/self/fd/{descriptor}", top, None, MS_BIND | MS_REC)
            finally:
                os.close(descriptor)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    return host_proc
