"""The loopback server's token file, shared by ``flotilla up``/``serve`` and the CLI.

Without a token config a server listens on loopback only, but loopback is not private: any
web page the user opens can send requests to ``127.0.0.1``. So, as Jupyter does, the server
generates a random token at start and writes it to a file only its user can read
(``server-PORT.json`` in the runtime directory, mode 0600, directory 0700); every API request
must carry it. The CLI, run by the same user, reads the file for the port it talks to, so
``flotilla submit …`` works as before with no token to copy. A browser cannot read the file.

The runtime directory is ``$FLOTILLA_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/flotilla``, else
``~/.local/state/flotilla/run``. This module depends on nothing else in Flotilla.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def runtime_dir() -> Path:
    configured = os.environ.get("FLOTILLA_RUNTIME_DIR")
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "flotilla"
    return Path.home() / ".local/state/flotilla/run"


def server_file(port: int) -> Path:
    return runtime_dir() / f"server-{port}.json"


def new_token() -> str:
    return secrets.token_urlsafe(32)


def write_server_file(port: int, token: str) -> Path:
    """Write the token for ``port``, readable by this user only; returns the file's path.

    A file left by a server that was killed is replaced. Raises ``OSError`` naming the path.
    """
    directory = runtime_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    path = server_file(port)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    data = json.dumps({"port": port, "token": token, "pid": os.getpid()})
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(data)
    os.replace(temporary, path)
    return path


def remove_server_file(port: int, token: str) -> None:
    """Remove the file for ``port`` if it still holds ``token`` (not a newer server's)."""
    path = server_file(port)
    if read_token_file(path) == token:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def read_token_file(path: Path) -> str | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    token = data.get("token") if isinstance(data, dict) else None
    return token if isinstance(token, str) and token else None


def token_for(server_url: str) -> str | None:
    """The token of the loopback server at ``server_url`` started by this user, if any."""
    try:
        parts = urlsplit(server_url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if parts.hostname is None or not is_loopback(parts.hostname):
        return None
    return read_token_file(server_file(port))
