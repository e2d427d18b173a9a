"""Requests go before scheduling: while the API handles one, a scheduling round of this
process yields to it (``scheduler/precedence.py``).

A request is urgent from its arrival until its response starts: a JSON body is rendered by
then, and what follows is socket writes. An event or log stream therefore stops being
urgent once its headers are sent, however long it stays open.

A large submission (``POST /v1/jobs`` with a body of ``BULK_BODY_BYTES`` or more) is bulk
work: the round still yields to it, but it paces itself (its validation, fit check and rows
call ``Precedence.pace`` between jobs), so a GET or a cancel that arrives while it is parsed
does not wait behind it.

A pure ASGI middleware, as ``guard.py``: it must see when the response starts.
"""

from __future__ import annotations

from flotilla.scheduler.precedence import Precedence
from flotilla.server.guard import App, Message, Receive, Scope, Send

BULK_BODY_BYTES = 16 * 1024
"""A submission this large is bulk work (about 100 jobs; one job's spec is a few hundred
bytes)."""

SUBMIT_PATH = "/v1/jobs"


def is_bulk(scope: Scope) -> bool:
    """Whether the request is a large submission, by its method, path and Content-Length."""
    if scope.get("method") != "POST" or scope.get("path") != SUBMIT_PATH:
        return False
    for key, value in scope.get("headers", []):
        if key.lower() == b"content-length":
            return value.isdigit() and int(value) >= BULK_BODY_BYTES
    return False


class RequestsFirst:
    def __init__(self, app: App, precedence: Precedence) -> None:
        self.app = app
        self.precedence = precedence

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        precedence = self.precedence
        urgent = True
        bulk = is_bulk(scope)
        precedence.begin(bulk)

        async def send_and_yield_no_more(message: Message) -> None:
            nonlocal urgent
            if urgent and message["type"] == "http.response.start":
                urgent = False
                precedence.end(bulk)
            await send(message)

        try:
            await self.app(scope, receive, send_and_yield_no_more)
        finally:
            if urgent:
                precedence.end(bulk)
