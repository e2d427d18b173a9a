"""``gpu_sharing: mps`` on the local backend: a replica holding a fraction of a GPU runs as a
client of an NVIDIA MPS control daemon whose server limits it to its share, or does not run.

NVIDIA's ``nvidia-cuda-mps-control`` page sets the terms: a client that cannot reach a
daemon "continues to run … without MPS", unlimited; the limits a client sets in its own
environment it can unset before CUDA starts; one daemon's servers run as one user. So:

- **A daemon per account and share.** Each daemon serves one account (the run's uid: its
  own with ``uid_range``, else ``run_as``'s or the server's) on one device, for one share
  (memory, SM percentage): ``<base>/<uid>/<device>-<MiB>M-<percent>/`` holds its ``pipe``
  and ``log`` directories. ``<base>`` (``/var/tmp/flotilla-mps-<hash of the state dir>``)
  is the server's, mode 0711: anyone may pass, nobody list; ``<uid>`` is the account's,
  mode 0700: its runs reach their daemons, no other tenant's do. The daemon is started as
  the account (a root server drops to it), its devices named by UUID.
- **Limits on the server side.** Once started, the daemon is told its share through the
  control commands ``set_default_device_pinned_mem_limit 0 <MiB>M`` and
  ``set_default_active_thread_percentage <percent>``: every server it starts, and so every
  client, has them whatever the client's environment says. The client variables
  (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``) are set too,
  after the job's own.
- **Liveness through the daemon.** A daemon is up when it answers ``get_server_list`` on its
  pipe, not when a ``control`` file is there (one left by a reboot is not a daemon).
- **Refused, not unlimited.** A replica whose daemon cannot be started, does not answer, or
  refuses a limit is not started: it fails with ``MPS limits not applied: <why>``, which
  ``describe`` shows as the run's reason.

A whole-GPU replica holds its device alone and gets no MPS (nothing to limit). A daemon whose
runs have all ended is told to ``quit`` (``retire``; the backend's monitor does it), and
every one when the backend stops its runs; a backend that restarts does not know the daemons
its predecessor started (they answer again when a run of the same account and share comes).
What MPS needs beyond this (a Volta or newer GPU; ``EXCLUSIVE_PROCESS`` compute mode, set
by the admin, allows one MPS server per GPU, so one account and share per GPU at a time
there) is in ``docs/backends.md``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flotilla.backends.interface import DispatchRequest, ReplicaPlacement
from flotilla.backends.local.gpu_sources import GpuDevice, GpuUnavailable

CONTROL = "nvidia-cuda-mps-control"
PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
MEMORY_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MIB = 2**20
ANSWER_SECONDS = 10.0
"""How long a control command may take before its daemon counts as not answering."""


def mps_base(state_dir: Path) -> Path:
    """Where a backend's daemons live: outside its 0700 state dir, so that each run's
    account can reach its own (``/var/tmp``: not a job's private ``/tmp``)."""
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
    return Path("/var/tmp") / f"flotilla-mps-{digest}"


@dataclass(frozen=True)
class Share:
    """One daemon's terms: the account it serves, the device, and the limits of its servers."""

    uid: int
    gid: int
    device: int
    uuid: str
    """The device's UUID, what the daemon's ``CUDA_VISIBLE_DEVICES`` names it by."""
    memory_mib: int
    percent: int

    @property
    def name(self) -> str:
        return f"{self.device}-{self.memory_mib}M-{self.percent}"


@dataclass(frozen=True)
class MpsDaemon:
    """The daemon of one share: ``directory/pipe`` and its logs in ``directory/log``."""

    directory: Path
    share: Share

    @property
    def pipe(self) -> Path:
        return self.directory / "pipe"

    @property
    def log(self) -> Path:
        return self.directory / "log"

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            PIPE_ENV: str(self.pipe),
            LOG_ENV: str(self.log),
            "CUDA_VISIBLE_DEVICES": self.share.uuid,
        }

    def _as_account(self) -> dict[str, object]:
        if os.geteuid() != 0 or self.share.uid == 0:
            return {}
        return {"user": self.share.uid, "group": self.share.gid, "extra_groups": []}

    def control(self, *commands: str) -> subprocess.CompletedProcess[str]:
        """Send ``commands`` to the daemon (one per line); raises ``GpuUnavailable`` when the
        command cannot run or takes longer than ``ANSWER_SECONDS``."""
        try:
            done: subprocess.CompletedProcess[str] = subprocess.run(
                [CONTROL],
                input="".join(f"{command}\n" for command in commands),
                env=self._env(),
                capture_output=True,
                text=True,
                check=False,
                timeout=ANSWER_SECONDS,
                **self._as_account(),  # type: ignore[call-overload]
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise GpuUnavailable(f"{CONTROL} did not answer ({error})") from None
        return done

    def answers(self) -> bool:
        """Whether the daemon is up: it answers on its pipe (a file proves nothing)."""
        try:
            return self.control("get_server_list").returncode == 0
        except GpuUnavailable:
            return False

    def start(self) -> None:
        """Start the daemon as its account with its limits, unless it answers already.
        Raises ``GpuUnavailable`` saying why it is not up with them."""
        if self.answers():
            return
        for directory in (self.directory, self.pipe, self.log):  # the account's, each
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            if os.geteuid() == 0:
                os.chown(directory, self.share.uid, self.share.gid)
        try:
            done = subprocess.run(
                [CONTROL, "-d"],
                env=self._env(),
                capture_output=True,
                text=True,
                check=False,
                timeout=ANSWER_SECONDS,
                **self._as_account(),  # type: ignore[call-overload]
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise GpuUnavailable(f"{CONTROL} -d failed ({error})") from None
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip() or f"exit {done.returncode}"
            raise GpuUnavailable(f"{CONTROL} -d failed: {why}")
        if not self.answers():
            raise GpuUnavailable(f"the MPS control daemon in {self.directory} does not answer")
        limits = self.control(
            f"set_default_device_pinned_mem_limit 0 {self.share.memory_mib}M",
            f"set_default_active_thread_percentage {self.share.percent}",
        )
        if limits.returncode != 0:
            why = (limits.stderr or limits.stdout).strip() or f"exit {limits.returncode}"
            self.stop()
            raise GpuUnavailable(f"the MPS control daemon refused the limits: {why}")

    def stop(self) -> None:
        """Ask the daemon to quit (it ends its servers once their clients are gone)."""
        with contextlib.suppress(GpuUnavailable):
            self.control("quit")


@dataclass
class MpsDaemons:
    """The backend's daemons, one per share in use (see the module)."""

    base: Path
    devices: Sequence[GpuDevice]
    device_memory: Mapping[int, int]
    _started: dict[Share, MpsDaemon] = field(default_factory=dict)
    _users: dict[Share, set[str]] = field(default_factory=dict)
    """Share → the runs whose replicas were given its daemon."""
    _idle: set[Share] = field(default_factory=set)
    """Shares found without an active run at the last ``retire``: quit at the next."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self) -> str:
        """One line for ``flotilla up``; raises ``GpuUnavailable`` without the control
        command (no replica could have its limits)."""
        if shutil.which(CONTROL) is None:
            raise GpuUnavailable(f"gpu_sharing mps: {CONTROL} is not on PATH")
        return f"MPS: a control daemon per account and share, under {self.base}"

    def _account_dir(self, uid: int, gid: int) -> Path:
        self.base.mkdir(mode=0o711, exist_ok=True)
        os.chmod(self.base, 0o711)
        directory = self.base / str(uid)
        directory.mkdir(mode=0o700, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(directory, uid, gid)
        os.chmod(directory, 0o700)
        return directory

    def share_of(
        self, request: DispatchRequest, placement: ReplicaPlacement, uid: int, gid: int
    ) -> Share | None:
        """The share a replica runs in (``None``: it holds whole devices, or none)."""
        if not placement.gpu_ids:
            return None
        asked = request.resources.get(placement.task, {})
        gpu = float(asked.get("gpu", 1.0) or 0.0)
        if not 0 < gpu < 1:
            return None
        [index] = placement.gpu_ids[:1]
        memory = asked.get("gpu_memory") or gpu * self.device_memory.get(index, 0)
        return Share(
            uid,
            gid,
            index,
            self.devices[index].uuid,
            max(1, int(float(memory) // MIB)),
            max(1, round(gpu * 100)),
        )

    def client_env(
        self, request: DispatchRequest, placement: ReplicaPlacement, uid: int, gid: int
    ) -> dict[str, str]:
        """The MPS variables of one replica, its daemon up with its limits first. Raises
        ``GpuUnavailable`` (``MPS limits not applied: …``) when it cannot be."""
        share = self.share_of(request, placement, uid, gid)
        if share is None:
            return {}
        with self._lock:
            daemon = self._started.get(share)
            try:
                if daemon is None:
                    daemon = MpsDaemon(self._account_dir(uid, gid) / share.name, share)
                daemon.start()
            except (GpuUnavailable, OSError) as error:
                raise GpuUnavailable(f"MPS limits not applied: {error}") from None
            self._started[share] = daemon
            self._users.setdefault(share, set()).add(request.run_id)
            self._idle.discard(share)
        return {
            PIPE_ENV: str(daemon.pipe),
            LOG_ENV: str(daemon.log),
            MEMORY_ENV: f"0={share.memory_mib}M",
            THREADS_ENV: str(share.percent),
        }

    def retire(self, active: Iterable[str]) -> None:
        """Tell every daemon none of whose runs is ``active`` (not ended) at two calls in a row
        to quit (one call apart: a run being started is not seen ended meanwhile)."""
        running = set(active)
        with self._lock:
            idle = {share for share, runs in self._users.items() if not runs & running}
            quitting = idle & self._idle
            self._idle = idle - quitting
            daemons = [self._started.pop(share) for share in quitting]
            for share in quitting:
                del self._users[share]
        for daemon in daemons:
            daemon.stop()

    def stop_all(self) -> None:
        """Tell every daemon to quit (the backend stopped its runs)."""
        with self._lock:
            daemons = list(self._started.values())
            self._started.clear()
            self._users.clear()
            self._idle.clear()
        for daemon in daemons:
            daemon.stop()
