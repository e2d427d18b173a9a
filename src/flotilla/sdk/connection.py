"""Where a client connects and with which token: the server's address, its bearer token and
the settings of the HTTP client under ``Client`` and ``AsyncClient``.

A module without ``httpx``, so that the CLI names the default server in every command's
options without importing the HTTP client (docs/performance.md, CLI start-up).
"""

from __future__ import annotations

import os
from typing import Any

from flotilla.runtime import token_for

DEFAULT_SERVER = "http://127.0.0.1:8467"
POLL = 0.1
"""Seconds between two polls of ``wait`` and ``logs(follow=True)`` when nothing changed."""


def server_address(server: str | None) -> str:
    """``server``, else ``$FLOTILLA_SERVER``, else the default of ``flotilla up``."""
    return (server or os.environ.get("FLOTILLA_SERVER") or DEFAULT_SERVER).rstrip("/")


def bearer_token(server: str, token: str | None) -> str | None:
    """``token``, else ``$FLOTILLA_TOKEN``, else the token file of a loopback server started
    by this user (``docs/api.md``)."""
    return token or os.environ.get("FLOTILLA_TOKEN") or token_for(server)


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def http_settings(server: str, token: str | None, timeout: float) -> dict[str, Any]:
    """The keyword arguments of the ``httpx`` client of a ``Client`` or ``AsyncClient``."""
    return {
        "base_url": server,
        "headers": auth_headers(bearer_token(server, token)),
        "timeout": timeout,
    }
