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
* **JSON that every store can hold.** A body must be JSON nested at most
  ``max_json_depth`` deep, with no ``Infinity``/``NaN`` (not JSON; PostgreSQL refuses them and
  SQLite stores them as invalid JSON) and no NUL character in any string or key (PostgreSQL
  text cannot hold one; a command with one can never start), and no object giving a key twice.
  The path and query must not carry NUL either. Each is a 400 naming the field.

A pure ASGI middleware (not ``@app.middleware``): it must see the body as it streams.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import anyio.to_thread

from flotilla.api.submission import SubmissionLimits
from flotilla.runtime import LOOPBACK_NAMES

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

THREAD_BODY_BYTES = 16 * 1024
"""A body at least this large is checked on a worker thread: the check is pure Python (about
0.2 ms per KiB), and on the event loop it would hold up every other request meanwhile."""


@dataclass(frozen=True)
class ServerLimits(SubmissionLimits):
    """Limits on what one request or one client may take (and, inherited, on what one
    submission may hold); every one has a safe default."""

    max_body_bytes: int = 8 * 1024 * 1024
    """A request body larger than this is refused (413) before it is read whole."""
    event_streams_per_client: int = 8
    """Open event streams per client address; one more is refused with 429."""
    event_streams_total: int = 256
    """Open event streams in all; one more is refused with 503."""
    max_json_depth: int = 32
    """How deeply a JSON body may nest (a job spec needs 6)."""


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
        unsafe = _nul_in_request(scope)
        if unsafe is not None:
            await _refuse(send, 400, f"{unsafe}: NUL characters are not allowed", [unsafe])
            return
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
        if body and content_type is not None:
            depth = self.limits.max_json_depth
            if len(body) < THREAD_BODY_BYTES:
                problem = check_json(body, depth)
            else:  # a large batch takes milliseconds: not on the event loop, which serves GETs
                problem = await anyio.to_thread.run_sync(check_json, body, depth)
            if problem is not None:
                await _refuse(send, 400, "the body is not acceptable JSON", [problem])
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _refuse(send: Send, status: int, message: str, problems: Sequence[str] = ()) -> None:
    body = json.dumps({"message": message, "problems": list(problems)}).encode()
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


class _Unacceptable(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _Unacceptable(f"{name} is not a JSON number")


class _Repeated(dict[str, Any]):
    """An object that gave a key more than once (``repeated``: the first such key). Kept to
    be found with its path after parsing: the parser builds objects innermost first."""

    repeated: str


class _KeepRepeated:
    """``json.loads``'s ``object_pairs_hook``: a ``_Repeated`` for an object that repeats a
    key (``seen``: one did, so the value is worth walking)."""

    def __init__(self) -> None:
        self.seen = False

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        value = dict(pairs)
        if len(value) == len(pairs):
            return value
        self.seen = True
        marked = _Repeated(value)
        keys: set[str] = set()
        for key, _ in pairs:
            if key in keys:
                marked.repeated = key
                break
            keys.add(key)
        return marked


def _repeated_path(value: Any, path: str) -> str | None:
    """``path.key: given more than once`` for the first object that repeats a key: which of
    the two the server would keep is a guess the client should not have to make (the CLI
    refuses them in job files too)."""
    if isinstance(value, _Repeated):
        where = f"{path}.{value.repeated}" if path else value.repeated
        return f"{where}: given more than once"
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
        found = _repeated_path(item, where)
        if found:
            return found
    return None


def json_depth(body: bytes) -> int:
    """How deeply ``body`` nests arrays and objects (strings skipped), without parsing it:
    Python's parser recurses and fails with RecursionError past ~1,000 levels."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def check_json(body: bytes, max_depth: int) -> str | None:
    """A ``field: problem`` line if ``body`` is not JSON Flotilla accepts, else None. Bodies
    that are not JSON at all are left to the route (which names its own error)."""
    if json_depth(body) > max_depth:
        return f"(top level): nested more than {max_depth} levels deep"
    repeats = _KeepRepeated()
    try:
        value = json.loads(body, parse_constant=_reject_constant, object_pairs_hook=repeats)
    except _Unacceptable as error:
        return f"(top level): {error}"
    except ValueError:
        return None
    if repeats.seen:
        return _repeated_path(value, "")
    if b"\\u0000" not in body:  # JSON strings carry NUL only escaped (a raw one is invalid)
        return None
    return _nul_path(value, "")


def _nul_path(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        return f"{path or '(top level)'}: NUL characters are not allowed" if "\0" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if "\0" in key:
                return f"{path or '(top level)'}: a key holds a NUL character"
            found = _nul_path(item, where)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _nul_path(item, f"{path}[{index}]")
            if found:
                return found
    return None


def _nul_in_request(scope: Scope) -> str | None:
    """The query parameter (or ``path``) carrying a NUL character, if any."""
    if "\0" in scope.get("path", ""):
        return "path"
    query = scope.get("query_string", b"")
    if b"%00" in query.lower() or b"\0" in query:
        for key, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            if "\0" in key or "\0" in value:
                return key.replace("\0", "") or "query"
        return "query"
    for key, value in scope.get("headers", []):
        if b"\0" in value:
            return str(key.decode("latin-1"))
    return None


LOOPBACK_HOSTS = frozenset(LOOPBACK_NAMES - {"::1"})
"""Host names a loopback server answers to (an IPv6 Host header carries brackets)."""
