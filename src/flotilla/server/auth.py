"""Bearer tokens mapped to users, and per-queue permissions.

The token file is YAML (or JSON)::

    users:
      - name: ana
        token_sha256: 5e88489...      # sha256 of the token, hex: the file holds no secret
        queues: {team-a: [submit, cancel], "*": [submit]}
      - name: ops
        token_env: FLOTILLA_OPS_TOKEN  # or the token itself, read from this variable at start
        admin: true

Permissions per queue: ``submit`` (submit jobs; cancel one's own), ``cancel`` (cancel anyone's
jobs in the queue), ``admin`` (both, and reprioritize). ``*`` stands for every queue. An
``admin`` user may do everything, including queue and quota changes.

Without a token file the server is for its own user only: ``check_bind`` refuses any listen
address but loopback, and ``flotilla up``/``serve`` generate a random local token at start
(``AuthSettings.local``) kept in a file only that user can read (``flotilla.runtime``); a
request with that token is the anonymous admin, any other is refused (a web page the user
opens can reach loopback, but cannot read the file). ``AuthSettings.disabled()`` (no token at
all) is for an app embedded in a test. Tokens are compared by their sha256 and never logged or
echoed.

``read`` on a queue lets a user see every job of that queue (specs, events, logs); without it
a user sees only their own jobs. ``cancel`` and ``admin`` on a queue include ``read``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from flotilla.model.base import Name
from flotilla.model.errors import SpecError, from_pydantic
from flotilla.model.loader import parse_document
from flotilla.runtime import is_loopback


class Permission(StrEnum):
    READ = "read"
    SUBMIT = "submit"
    CANCEL = "cancel"
    ADMIN = "admin"


ANY_QUEUE = "*"

SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


@dataclass(frozen=True)
class User:
    """Who made a request, and what they may do."""

    name: str
    admin: bool = False
    queues: Mapping[str, frozenset[Permission]] = field(default_factory=dict)

    def can(self, permission: Permission, queue: str) -> bool:
        if self.admin:
            return True
        granted = self.queues.get(queue, frozenset()) | self.queues.get(ANY_QUEUE, frozenset())
        if permission is Permission.READ and Permission.CANCEL in granted:
            return True
        return permission in granted or Permission.ADMIN in granted

    def can_read_all(self) -> bool:
        """Whether this user may read every queue's jobs (admin, or read on ``*``)."""
        return self.admin or self.can(Permission.READ, ANY_QUEUE)

    def may_read(self, queue: str, owner: str) -> bool:
        """A job of ``owner`` in ``queue``: one's own, or any with ``read`` on the queue."""
        return owner == self.name or self.can(Permission.READ, queue)


ANONYMOUS = User(name="anonymous", admin=True)
"""Everyone, when the server runs without a token file (loopback only)."""


class _UserEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name
    token_sha256: str | None = None
    token_env: str | None = Field(default=None, min_length=1)
    admin: bool = False
    queues: dict[str, list[Permission]] = {}

    @field_validator("token_sha256")
    @classmethod
    def _hex_digest(cls, value: str | None) -> str | None:
        if value is not None and not SHA256_HEX.fullmatch(value):
            raise ValueError(
                f"must be the sha256 of the token as 64 hex digits, got {len(value)} "
                'characters (make it with: printf %s "$TOKEN" | sha256sum); to give the '
                "token itself, put it in an environment variable and name that in token_env"
            )
        return value

    @model_validator(mode="after")
    def _one_token(self) -> _UserEntry:
        if (self.token_sha256 is None) == (self.token_env is None):
            raise ValueError("give exactly one of token_sha256 and token_env")
        return self


class _AuthFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    users: list[_UserEntry] = Field(min_length=1)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class AuthSettings:
    """Users by the sha256 of their token. Empty: authentication is off (anonymous admin)."""

    users_by_token_hash: Mapping[str, User] = field(default_factory=dict)
    local_token_sha256: str | None = None
    """The loopback default: the sha256 of the token generated at start (see the module)."""
    local_user: User = ANONYMOUS
    """Who shows the local token: an admin named after the server's own user, so the jobs
    it submits have an owner (``jobs --owner``, ``usage --by owner``), not "-"."""

    @property
    def enabled(self) -> bool:
        return bool(self.users_by_token_hash)

    @classmethod
    def disabled(cls) -> AuthSettings:
        """No authentication at all: only for an app embedded in a test or a program."""
        return cls()

    @classmethod
    def local(cls, token: str, name: str | None = None) -> AuthSettings:
        """The loopback default: whoever shows ``token`` is an admin named ``name`` (the
        server's user), else the anonymous admin."""
        user = ANONYMOUS if name is None else User(name=name, admin=True)
        return cls(local_token_sha256=token_hash(token), local_user=user)

    @classmethod
    def from_file(cls, path: Path, environ: Mapping[str, str] | None = None) -> AuthSettings:
        try:
            text = path.read_text()
        except OSError as error:
            raise SpecError(
                [f"(top level): cannot read token config: {error}"], str(path)
            ) from None
        data = parse_document(text, str(path))  # a user given twice is an error, not the last
        return cls.from_data(data, environ, source=str(path))

    @classmethod
    def from_data(
        cls, data: Any, environ: Mapping[str, str] | None = None, source: str | None = None
    ) -> AuthSettings:
        """Raises ``SpecError`` naming each bad field (``users[1].token_env: …``)."""
        environ = os.environ if environ is None else environ
        try:
            config = _AuthFile.model_validate(data)
        except ValidationError as error:
            raise from_pydantic(error, source) from None
        users: dict[str, User] = {}
        names: set[str] = set()
        problems: list[str] = []
        for index, entry in enumerate(config.users):
            where = f"users[{index}]"
            if entry.name in names:
                problems.append(f"{where}.name: user {entry.name!r} is defined twice")
            names.add(entry.name)
            if entry.token_env is not None:
                token = environ.get(entry.token_env, "")
                if not token:
                    problems.append(
                        f"{where}.token_env: environment variable {entry.token_env} is not set"
                    )
                    continue
                digest = token_hash(token)
            else:
                digest = (entry.token_sha256 or "").lower()
            if digest in users:
                problems.append(f"{where}: has the same token as user {users[digest].name!r}")
                continue
            queues = {queue: frozenset(perms) for queue, perms in entry.queues.items()}
            users[digest] = User(name=entry.name, admin=entry.admin, queues=queues)
        if problems:
            raise SpecError(problems, source)
        return cls(users_by_token_hash=users)

    def authenticate(self, authorization: str | None) -> User | None:
        """The user an ``Authorization: Bearer …`` header names; None if it names nobody."""
        if not self.enabled and self.local_token_sha256 is None:
            return ANONYMOUS
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        digest = token_hash(token.strip())
        if not self.enabled:
            assert self.local_token_sha256 is not None
            matches = hmac.compare_digest(digest, self.local_token_sha256)
            return self.local_user if matches else None
        # Looked up by digest: timing can at most reveal a prefix of a sha256, not the token.
        return self.users_by_token_hash.get(digest)


class InsecureBindError(RuntimeError):
    """Listening beyond this host without authentication would make anyone an admin."""


def check_bind(host: str, auth: AuthSettings) -> None:
    """Refuse a non-loopback listen address unless tokens are configured."""
    if not auth.enabled and not is_loopback(host):
        raise InsecureBindError(
            f"refusing to listen on {host} without authentication: anyone who can reach it "
            "would be an admin. Give a token config (--auth FILE; see docs/api.md) or listen "
            "on 127.0.0.1."
        )
