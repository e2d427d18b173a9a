"""What every request passes before any route: Host, content type and body size.

* **Host.** A server on loopback answers only to a loopback ``Host`` (``localhost``,
  ``127.0.0.1``, ``[::1]``): a web page that rebinds its own DNS name to 127.0.0.1 sends its
  own name and is refused (403), as Jupyter does.
* **JSON only.** A request body must be ``application/json``. A browser sends a cross-origin
  ``text/plain`` or form POST without asking first; a JSON one needs a CORS preflight, which
  this server never grants. Refused with 415.
* **Body size.** At most ``ServerLimits.max_body_bytes`` (413), checked against
  ``Content-Length`` first and counted while reading otherwise, so a huge body is never held
  in memory or stored.

A pure ASGI middleware (not ``@app.middleware``): it must see the body as it streams.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from flotilla.runtime import LOOPBACK_NAMES

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class ServerLimits:
    """Limits on what one request or one client may take; every one has a safe default."""

    max_body_bytes: int = 8 * 1024 * 1024
    """A request body larger than this is refused (413) before it is read whole."""
    event_streams_per_client: int = 8
    """Open event streams per client address; one more is refused with 429."""
    event_streams_total: int = 256
    """Open event streams in all; one more is refused with 503."""


def host_name(header: str) -> str:
    """``Host`` without its port: ``[::1]:8467`` → ``[::1]``, ``a.b:80`` → ``a.b``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[: header.find("]") + 1] if "]" in header else header
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class RequestGuard:
    """The ASGI middleware; ``allowed_hosts`` None: any Host (a server beyond loopback)."""

    def __init__(
        self, app: App, limits: ServerLimits, allowed_hosts: frozenset[str] | None
    ) -> None:
        self.app = app
        self.limits = limits
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {
            key.decode("latin-1").lower(): value.decode("latin-1")
            for key, value in scope.get("headers", [])
        }
        if self.allowed_hosts is not None:
            host = host_name(headers.get("host", ""))
            if host not in self.allowed_hosts:
                await _refuse(
                    send,
                    403,
                    f"Host {host!r} is not allowed: this server answers to "
                    f"{', '.join(sorted(self.allowed_hosts))} only",
                )
                return
        if scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        content_type = headers.get("content-type")
        length_header = headers.get("content-length")
        try:
            length = int(length_header) if length_header is not None else None
        except ValueError:
            await _refuse(send, 400, "content-length: not a number")
            return
        if content_type is not None and not is_json(content_type):
            await _refuse(
                send, 415, f"content-type: {content_type!r} is not accepted; send application/json"
            )
            return
        limit = self.limits.max_body_bytes
        if length is not None and length > limit:
            await _refuse(send, 413, f"body: {length} bytes is more than the limit of {limit}")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _refuse(send, 413, f"body: more than the limit of {limit} bytes")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        if size and content_type is None:
            await _refuse(send, 415, "content-type: required with a body; send application/json")
            return
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _refuse(send: Send, status: int, message: str) -> None:
    body = json.dumps({"message": message, "problems": []}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


LOOPBACK_HOSTS = frozenset(LOOPBACK_NAMES - {"::1"})
"""Host names a loopback server answers to (an IPv6 Host header carries brackets)."""
