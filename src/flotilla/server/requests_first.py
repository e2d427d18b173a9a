"""Requests go before scheduling: while the API handles one, a scheduling round of this
process yields to it (``scheduler/precedence.py``).

A request is urgent from its arrival until its response starts: a JSON body is rendered by
then, and what follows is socket writes. An event or log stream therefore stops being
urgent once its headers are sent, however long it stays open.

A pure ASGI middleware, as ``guard.py``: it must see when the response starts.
"""

from __future__ import annotations

from flotilla.scheduler.precedence import Precedence
from flotilla.server.guard import App, Message, Receive, Scope, Send


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
        precedence.begin()

        async def send_and_yield_no_more(message: Message) -> None:
            nonlocal urgent
            if urgent and message["type"] == "http.response.start":
                urgent = False
                precedence.end()
            await send(message)

        try:
            await self.app(scope, receive, send_and_yield_no_more)
        finally:
            if urgent:
                precedence.end()
