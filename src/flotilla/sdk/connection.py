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


def tls_settings(server: str) -> dict[str, Any]:
    """For an ``http://`` server reached without a proxy, a TLS context that loads no
    certificate, for the ``httpx`` client's ``verify``: httpx otherwise makes one for every
    client, reading the whole CA bundle (35 ms of CPU, a tenth of a CLI command), and a plain
    HTTP request never uses it. Trusting no certificate, it verifies nothing: a request to
    an ``https://`` address through it fails. With a ``*_proxy`` variable set (a proxy may
    be ``https://``) and for an ``https://`` server, nothing: httpx's own verification."""
    proxied = any(
        name.lower().endswith("_proxy") and name.lower() != "no_proxy" and value
        for name, value in os.environ.items()
    )
    if not server.lower().startswith("http://") or proxied:
        return {}
    import ssl

    return {"verify": ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)}


def http_settings(server: str, token: str | None, timeout: float) -> dict[str, Any]:
    """The keyword arguments of the ``httpx`` client of a ``Client`` or ``AsyncClient``."""
    return {
        "base_url": server,
        "headers": auth_headers(bearer_token(server, token)),
        "timeout": timeout,
        **tls_settings(server),
    }
