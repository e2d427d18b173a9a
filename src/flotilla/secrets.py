"""Secret values in a job's ``payload.env``: sealed at submission, opened only at dispatch.

A job marks a variable secret by giving ``{"secret": "VALUE"}`` instead of a string::

    payload:
      command: ["python", "train.py"]
      env: {DB_USER: ana, DB_PASSWORD: {secret: hunter2}}

The API server encrypts it at submission (Fernet: AES-128-CBC with HMAC-SHA256) and stores
``{"encrypted": "…"}``; the database never holds the value in clear. The API returns it as
``{"secret": "(hidden)"}``, to every caller, admins included; the CLI prints what the API
returns. The scheduler decrypts it when it hands the run to a backend, which passes it to the
job's process environment (and must never log it).

The key is a file (``FLOTILLA_SECRET_KEY_FILE``, default ``~/.local/state/flotilla/secret.key``)
made on first use, mode 0600. Every server and scheduler replica of one database needs the
same key file; a replica with another key fails such a job at dispatch, saying so.

Secret values a process resolves for itself (a fleet's ``{env: NAME}``/``{file: PATH}``
setting references) are also kept out of its logs: ``hide_in_logs`` registers them, and every
log record made afterwards has them replaced by ``(hidden)``, in its message and its traceback.

This module depends on nothing else in Flotilla, so the server and the scheduler share it.
``cryptography`` is imported by ``SecretBox``, which only they make: the CLI checks a job
file's secrets (``placeholders``) and reads jobs (``redact``) without it (docs/performance.md,
CLI start-up).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

HIDDEN = "(hidden)"

MIN_HIDDEN_LENGTH = 6
"""A shorter secret (or line of one) is not hidden in logs: hiding ``8`` or ``true`` would
mangle every message that holds one, and reveals nothing worth keeping."""


class SecretError(ValueError):
    """A secret that cannot be sealed or opened; ``problems`` name the field."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def default_key_file() -> Path:
    configured = os.environ.get("FLOTILLA_SECRET_KEY_FILE")
    if configured:
        return Path(configured)
    return Path.home() / ".local/state/flotilla/secret.key"


class SecretBox:
    """Seals and opens the secret values of payloads with one key."""

    def __init__(self, key: bytes) -> None:
        from cryptography.fernet import Fernet

        self._fernet: Fernet = Fernet(key)

    def __repr__(self) -> str:
        return "SecretBox(<key hidden>)"

    @classmethod
    def from_file(cls, path: Path | None = None) -> SecretBox:
        """The key in ``path`` (default ``default_key_file()``), made (0600) if missing."""
        path = path or default_key_file()
        try:
            return cls(path.read_bytes().strip())
        except FileNotFoundError:
            pass
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        from cryptography.fernet import Fernet

        key = Fernet.generate_key()
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another replica made it meanwhile
            return cls(path.read_bytes().strip())
        with os.fdopen(descriptor, "wb") as file:
            file.write(key)
        return cls(key)

    def seal(self, payload: Mapping[str, Any] | None, where: str = "payload") -> Any:
        """``payload`` with every ``{"secret": value}`` of its ``env`` encrypted. Raises
        ``SecretError`` naming each bad field."""
        return _map_env(payload, where, self._seal_one)

    def open(self, payload: Mapping[str, Any] | None, where: str = "payload") -> Any:
        """``payload`` with every encrypted value of its ``env`` in clear, for a backend."""
        return _map_env(payload, where, self._open_one)

    def _seal_one(self, value: Any, field: str) -> Any:
        if isinstance(value, Mapping) and set(value) == {"secret"}:
            secret = value["secret"]
            if not isinstance(secret, str) or "\0" in secret:
                raise SecretError([f"{field}.secret: must be a string without NUL bytes"])
            return {"encrypted": self._fernet.encrypt(secret.encode()).decode()}
        if isinstance(value, Mapping) and "encrypted" in value:
            raise SecretError([f"{field}: give a secret as {{secret: VALUE}}"])
        return value

    def _open_one(self, value: Any, field: str) -> Any:
        if isinstance(value, Mapping) and set(value) == {"encrypted"}:
            from cryptography.fernet import InvalidToken

            try:
                return self._fernet.decrypt(str(value["encrypted"]).encode()).decode()
            except InvalidToken:
                raise SecretError(
                    [
                        f"{field}: cannot decrypt: this replica's secret key is not the one "
                        "of the server that accepted the job"
                    ]
                ) from None
        return value


def redact(payload: Any) -> Any:
    """``payload`` as the API shows it: every secret or sealed env value hidden."""
    return _map_env(payload, "payload", lambda value, _field: _hide(value))


def placeholders(payload: Any) -> Any:
    """``payload`` with secret env values as plain strings, to validate its shape."""
    return _map_env(payload, "payload", lambda value, _field: _stand_in(value))


def has_secrets(payload: Any) -> bool:
    env = payload.get("env") if isinstance(payload, Mapping) else None
    return isinstance(env, Mapping) and any(isinstance(v, Mapping) for v in env.values())


def _hide(value: Any) -> Any:
    if isinstance(value, Mapping) and set(value) & {"secret", "encrypted"}:
        return {"secret": HIDDEN}
    return value


def _stand_in(value: Any) -> Any:
    if isinstance(value, Mapping) and set(value) in ({"secret"}, {"encrypted"}):
        inner = value.get("secret", "")
        return inner if isinstance(inner, str) else value
    return value


def _map_env(payload: Any, where: str, change: Any) -> Any:
    if not isinstance(payload, Mapping):
        return payload
    env = payload.get("env")
    if not isinstance(env, Mapping):
        return payload
    problems: list[str] = []
    changed: dict[str, Any] = {}
    for name, value in env.items():
        try:
            changed[name] = change(value, f"{where}.env.{name}")
        except SecretError as error:
            problems.extend(error.problems)
    if problems:
        raise SecretError(problems)
    return {**payload, "env": changed}


# --- secrets kept out of logs -------------------------------------------------------------

_hidden: tuple[str, ...] = ()
"""What ``hide_in_logs`` was given, longest first; replaced whole (never changed in place), so
a thread logging meanwhile reads one consistent tuple."""
_hidden_lock = threading.Lock()
_original_factory: Callable[..., logging.LogRecord] | None = None


def hide_in_logs(values: Iterable[str]) -> None:
    """From now on, every log record of this process shows each of ``values`` (and each
    line of one, as a ``repr`` in an error message escapes the newlines between them) as
    ``(hidden)``. A backend that quotes a setting in its own error cannot leak it so."""
    global _hidden, _original_factory
    parts = {
        part.strip()
        for value in values
        for part in (value, *value.splitlines())
        if len(part.strip()) >= MIN_HIDDEN_LENGTH
    }
    if not parts:
        return
    with _hidden_lock:
        _hidden = tuple(sorted(parts | set(_hidden), key=len, reverse=True))
        if _original_factory is None:
            _original_factory = logging.getLogRecordFactory()
            logging.setLogRecordFactory(_hiding_record)


def hidden_in_logs(text: str) -> str:
    """``text`` with every value given to ``hide_in_logs`` replaced by ``(hidden)``."""
    for part in _hidden:
        if part in text:
            text = text.replace(part, HIDDEN)
    return text


def _hiding_record(*args: object, **kwargs: object) -> logging.LogRecord:
    assert _original_factory is not None
    record = _original_factory(*args, **kwargs)
    try:
        message = record.getMessage()
    except Exception:  # a malformed call: the handler reports it, as without this factory
        return record
    hidden = hidden_in_logs(message)
    if hidden != message:
        record.msg, record.args = hidden, None
    if record.exc_info and record.exc_info[1] is not None:
        text = logging.Formatter().formatException(record.exc_info)
        record.exc_text = hidden_in_logs(text)
    return record
