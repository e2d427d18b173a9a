"""The body limit counts every chunk of a body sent without ``Content-Length`` (chunked
transfer encoding): each chunk alone is under the limit, the body is not.

The 413 test of ``test_api_hostile_input.py`` sends a ``Content-Length``, and the test client
joins a streamed body into one message, so a limit checked per chunk passed both. Here the
guard gets the body as a server delivers a chunked one: one ASGI message per chunk.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from flotilla.server.guard import Message, RequestGuard, Scope, ServerLimits

LIMIT = 1000
CHUNK = b" " * 400
"""Whitespace: valid JSON padding, so only the size can refuse it."""


def post(chunks: list[bytes]) -> tuple[int, dict[str, Any], bool]:
    """POST ``chunks`` through the guard; the status, the answer, and whether the app ran."""
    reached: list[bytes] = []

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        reached.append((await receive())["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    messages = [
        {"type": "http.request", "body": chunk, "more_body": index < len(chunks) - 1}
        for index, chunk in enumerate(chunks)
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/jobs",
        "raw_path": b"/v1/jobs",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
    }
    guard = RequestGuard(app, ServerLimits(max_body_bytes=LIMIT), frozenset({"127.0.0.1"}))
    asyncio.run(guard(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(body), bool(reached)


def test_a_chunked_body_over_the_limit_in_total_is_413_though_no_chunk_is() -> None:
    chunks = [b"{}", *[CHUNK] * 3]  # 1202 bytes in chunks of at most 400
    status, answer, reached = post(chunks)
    assert (status, reached) == (413, False), answer
    assert str(LIMIT) in answer["message"]


def test_a_chunked_body_under_the_limit_reaches_the_app_whole() -> None:
    status, _, reached = post([b"{}", CHUNK, CHUNK])
    assert (status, reached) == (200, True)
