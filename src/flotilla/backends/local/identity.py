"""Who a ``local`` job runs as: the server's own user, one fixed account (``run_as``), or a
uid from a range (``uid_range``, as systemd's ``DynamicUser=`` does; issue 23): under a
server, each owner's own (``owner_uids``: the store keeps which, so all of one owner's runs
share it and two owners never do; issue 37), else one per run.

With one account for every job, a job can read another's ``/proc/PID/environ`` (its
decrypted secrets), write into its scratch dir and ``kill -9 -1`` it. A uid per run closes
all three: the kernel refuses each across uids.

A dynamic uid is claimed durably and across processes (two backends over one state dir,
several servers on one machine, a restart) by creating ``/run/flotilla/uids/UID/OWNER.RUN_ID``
(``OWNER``: a digest of the state dir; ``/run`` is cleared at boot, as the processes are).
A uid per run: ``mkdir`` of the uid's directory is the exclusive step, the file inside names
the run holding it. An owner's uid: one file per run of the owner, the directory shared by
them; a claim that finds a file of another state dir there backs off. The run's record in the
state dir keeps its uid too, so a restarted backend gives it back only once the run is over.
A claim is released only after every process of its run is gone: when the run has ended,
the backend kills whatever is left in the run's cgroups (daemons that left its process group
included: a process never leaves its cgroup) and removes the run's claim once they are empty
(``LocalBackend._finish_sweeps``). Never by uid: a backend that sweeps a run late (two
servers over one state dir) would otherwise kill the uid's next run, and an owner's uid is
shared by its runs still going. So a uid from the range needs cgroups (the backend refuses
``uid_range`` without them), and a release removes only its own run's claim (the uid's
directory goes with its last one). Released uids are reused least recently used first. A uid
with an account in the user database is never handed out, nor the server's own.
"""

from __future__ import annotations

import grp
import hashlib
import logging
import os
import pwd
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from flotilla.backends.interface import BackendUnavailable
from flotilla.model.owner_uids import OwnerUid, OwnerUidRequest

log = logging.getLogger(__name__)

DEFAULT_UID_RANGE = (60000, 60999)
"""Below systemd's dynamic range (61184-65519) and ``nobody`` (65534), above the ranges
distributions give to accounts; a uid of it that has an account here is skipped."""


class OwnerUids(Protocol):
    """Where each owner's uid of the range is kept for good (the store: ``SqlStore.owner_uid``)."""

    def owner_uid(self, request: OwnerUidRequest) -> OwnerUid: ...


@dataclass(frozen=True)
class Identity:
    """The user a run's commands run as. ``dynamic``: a uid of its own from the range,
    without an account (``name`` is made up; ``home`` is ``None``: the run's scratch dir)."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str
    home: str | None
    dynamic: bool = False

    def to_json(self) -> dict[str, object]:
        return {"uid": self.uid, "gid": self.gid, "dynamic": self.dynamic}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Identity:
        uid, gid = int(str(data["uid"])), int(str(data["gid"]))
        return dynamic_identity(uid) if data.get("dynamic") else cls(uid, gid, (), "", None)


def dynamic_identity(uid: int) -> Identity:
    return Identity(uid, uid, (), f"flotilla-{uid}", None, dynamic=True)


def fixed_identity(user: str | None) -> Identity | None:
    """The account ``run_as`` names (``None``: the server's own user); raises ``ValueError``
    naming the setting."""
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
    groups = tuple(os.getgrouplist(found.pw_name, found.pw_gid))
    return Identity(found.pw_uid, found.pw_gid, groups, found.pw_name, found.pw_dir)


def parse_uid_range(value: object) -> tuple[int, int]:
    """``"60000-60999"`` or ``[60000, 60999]``; raises ``ValueError`` naming ``uid_range``."""
    parts: list[object]
    if isinstance(value, str):
        parts = list(value.split("-", 1)) if "-" in value else [value]
    elif isinstance(value, list | tuple):
        parts = list(value)
    else:
        parts = []
    try:
        if len(parts) != 2 or any(isinstance(part, bool) for part in parts):
            raise ValueError
        first, last = (int(str(part).strip()) for part in parts)
    except ValueError:
        raise ValueError(
            f"uid_range: {value!r} must be FIRST-LAST, two uids (e.g. '60000-60999')"
        ) from None
    if not 1 <= first <= last < 2**31 - 1:
        raise ValueError(f"uid_range: {value!r} must satisfy 1 <= FIRST <= LAST < 2147483647")
    return first, last


STALE_CLAIM_SECONDS = 60.0

CLAIMS = Path("/run/flotilla/uids")
"""Where uids are claimed, machine-wide (without ``/run``: under the state dir)."""


def claims_directory(state_dir: Path) -> Path:
    return CLAIMS if CLAIMS.parent.parent.is_dir() else state_dir / "uids"


def claim_owner(state_dir: Path) -> str:
    """The prefix of this state dir's claims (a digest: no path in the claims directory)."""
    return hashlib.sha256(str(state_dir).encode()).hexdigest()[:16]


class IdentityPool:
    """Claims and releases dynamic uids; see the module docstring."""

    def __init__(self, state_dir: Path, uid_range: tuple[int, int]) -> None:
        if os.geteuid() != 0:
            raise ValueError("uid_range: giving each run a uid of its own needs root")
        self.first, self.last = uid_range
        self.directory = claims_directory(state_dir)
        self.owner = claim_owner(state_dir)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        own = os.getuid()
        self._free: OrderedDict[int, None] = OrderedDict(
            (uid, None) for uid in range(self.first, self.last + 1) if uid != own
        )
        """Candidates, least recently used first (an account's uid is dropped on sight)."""

    @property
    def described(self) -> str:
        return f"{self.first}-{self.last}"

    def note_used(self, uid: int) -> None:
        """A run on record holds or held ``uid``: try it after the ones never used (called in
        the order the runs ended)."""
        if uid in self._free:
            self._free.move_to_end(uid)

    def claim(self, run_id: str, *, take_over: bool = False) -> Identity:
        """A uid nobody holds, claimed for ``run_id`` durably before it returns; raises
        ``BackendUnavailable`` when every uid of the range is held (a retry later finds one
        once a run ends). ``take_over``: first look for a claim of ``run_id`` already on
        disk — a process that died while it prepared the run, before any process ran as the
        uid — and take it rather than leave it held (the run's lock is held: nobody else
        prepares it)."""
        if take_over:
            for uid, holders in self.held().items():
                if run_id in holders:
                    return dynamic_identity(uid)
        for uid in list(self._free):
            if _has_account(uid):  # or a group: the job would be in it
                del self._free[uid]
                continue
            if self._try_claim(uid, run_id):
                self._free.move_to_end(uid)
                return dynamic_identity(uid)
        raise BackendUnavailable(
            f"every uid of uid_range {self.described} is held by a run; a dispatch is "
            "retried once one has ended (a wider uid_range allows more runs at once)"
        )

    def _try_claim(self, uid: int, run_id: str) -> bool:
        held = self.directory / str(uid)
        try:
            held.mkdir(mode=0o700)
        except FileExistsError:
            return False
        try:
            descriptor = os.open(
                held / f"{self.owner}.{run_id}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600
            )
        except FileNotFoundError:  # released meanwhile by a backend that held it: next one
            return False
        os.fsync(descriptor)
        os.close(descriptor)
        _sync_directory(held)
        _sync_directory(self.directory)
        return True

    def claim_shared(self, uid: int, run_id: str) -> Identity:
        """Claim ``uid`` (an owner's, ``OwnerUids``) for ``run_id`` beside the owner's other
        runs holding it, durably before it returns (again: a claim a process left while it
        prepared the run is taken over). Raises ``BackendUnavailable`` while a run of another
        state dir (another server on this machine) holds it: a dispatch is retried."""
        held = self.directory / str(uid)
        mine = f"{self.owner}.{run_id}"
        for _attempt in range(3):
            held.mkdir(mode=0o700, exist_ok=True)
            try:
                descriptor = os.open(held / mine, os.O_WRONLY | os.O_CREAT, 0o600)
            except FileNotFoundError:  # the last run of the uid released it meanwhile
                continue
            os.fsync(descriptor)
            os.close(descriptor)
            _sync_directory(held)
            _sync_directory(self.directory)
            try:
                names = os.listdir(held)
            except FileNotFoundError:
                continue
            if any(not name.startswith(f"{self.owner}.") for name in names):
                release_claim(self.directory, self.owner, uid, run_id)
                raise BackendUnavailable(
                    f"uid {uid} is held by a run of another Flotilla server on this machine; "
                    "a dispatch is retried once it has ended (give the servers uid ranges "
                    "that do not overlap)"
                )
            return dynamic_identity(uid)
        raise BackendUnavailable(f"uid {uid} was released while it was claimed; retried")

    def unusable(self) -> frozenset[int]:
        """The uids of the range no owner may be given now: those with an account (or a
        group) on this machine, the server's own, and every uid a run holds — an owner given
        a uid has no run yet, so a held uid is someone else's (a run of another state dir, or
        of a uid per run from before owners had theirs)."""
        own = os.getuid()
        found = {uid for uid in range(self.first, self.last + 1) if uid == own or _has_account(uid)}
        for entry in self.directory.iterdir():
            if entry.name.isdigit() and self.first <= int(entry.name) <= self.last:
                found.add(int(entry.name))
        return frozenset(found)

    def held(self) -> dict[int, tuple[str, ...]]:
        """The uids of this range claimed on disk, each with the runs of this state dir
        holding it (none: a claim interrupted between its two steps); those held only by other
        state dirs are left out."""
        claims: dict[int, tuple[str, ...]] = {}
        for entry in self.directory.iterdir():
            if not entry.name.isdigit() or not self.first <= int(entry.name) <= self.last:
                continue
            try:
                names = os.listdir(entry)
            except OSError:
                continue
            ours = tuple(
                name.split(".", 1)[1] for name in names if name.startswith(f"{self.owner}.")
            )
            if ours or not names:
                claims[int(entry.name)] = ours
        return claims

    def release_stale(self, holds: Callable[[str, int], bool]) -> None:
        """Give back the uids of this state dir claimed for a run that does not hold them
        (``holds(run_id, uid)`` false): the backend died between claim and record (before
        any process ran as the uid), or between recording a release and removing the claim.
        Only claims a minute old: a live dispatch may be between the two."""
        for uid, run_ids in self.held().items():
            if not run_ids:
                if self._age(self.directory / str(uid)) > STALE_CLAIM_SECONDS:
                    self.release(uid, None)
                continue
            for run_id in run_ids:
                if holds(run_id, uid):
                    continue  # the run's own end gives it back
                claim = self.directory / str(uid) / f"{self.owner}.{run_id}"
                if self._age(claim) > STALE_CLAIM_SECONDS:
                    self.release(uid, run_id)

    @staticmethod
    def _age(path: Path) -> float:
        try:
            return time.time() - os.stat(path).st_mtime
        except FileNotFoundError:
            return 0.0

    def release(self, uid: int, run_id: str | None) -> None:
        """Give ``uid`` back, if ``run_id`` (``None``: nobody) still holds it."""
        if release_claim(self.directory, self.owner, uid, run_id):
            self._free[uid] = None
            self._free.move_to_end(uid)


def claim_owners_uid(
    pool: IdentityPool, store: OwnerUids, known: dict[str, int], owner: str, run_id: str
) -> Identity:
    """Claim ``owner``'s uid for ``run_id``: the one the store keeps for it (``known``: those
    read already; an owner's uid never changes), given now if it has none. Raises
    ``BackendUnavailable`` when none can be had now (the range is full, the store does not
    answer, another server's run holds it): the dispatch is retried."""
    uid = known.get(owner)
    if uid is None:
        try:
            answer = store.owner_uid(OwnerUidRequest(owner, pool.first, pool.last, pool.unusable()))
        except Exception as error:  # the database: the dispatch is retried, not failed
            raise BackendUnavailable(
                f"owner {owner!r}'s uid could not be read from the database: {error}"
            ) from error
        if answer.uid is None:
            raise BackendUnavailable(
                f"every uid of uid_range {pool.described} belongs to another owner or has an "
                f"account here: owner {owner!r} gets none (a wider uid_range gives more owners "
                "a uid of their own)"
            )
        uid = known[owner] = answer.uid
        if answer.assigned:
            log.info("owner %r: runs as uid %d from now on", owner, uid)
    return pool.claim_shared(uid, run_id)


def claimed(state_dir: Path, uid: int, run_id: str) -> bool:
    """Whether ``run_id`` of ``state_dir`` still holds its claim of ``uid``."""
    name = f"{claim_owner(state_dir)}.{run_id}"
    return (claims_directory(state_dir) / str(uid) / name).exists()


def release_claim(directory: Path, owner: str, uid: int, run_id: str | None) -> bool:
    """Remove ``run_id``'s claim of ``uid`` (``None``: an empty one); True if it did. Only the
    holder's own file is removed, then the uid's directory: a release repeated by another
    backend, after someone else claimed the uid, removes nothing of theirs."""
    held = directory / str(uid)
    if run_id is not None:
        try:
            (held / f"{owner}.{run_id}").unlink()
        except FileNotFoundError:
            return False
    try:
        held.rmdir()
    except OSError:
        return False  # not empty: someone else's claim
    _sync_directory(directory)
    return True


def _has_account(uid: int) -> bool:
    """True when ``uid`` is a user's or a group's id in this machine's databases."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
        except KeyError:
            continue
        return True
    return False


def _sync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
