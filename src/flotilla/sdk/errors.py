"""The SDK's exceptions: one per kind of refusal, each carrying the API's message and problems.

Every error body of the API has one shape, ``{"message": ..., "problems": [...]}``; the
status picks the class (``ERRORS``), so callers catch what they can handle:

    try:
        client.get("train")
    except flotilla.NotFound: ...
    except flotilla.Ambiguous as error: print(error.problems)   # the candidates
"""

from __future__ import annotations


class FlotillaError(Exception):
    """A request that did not succeed. ``status`` is the HTTP status (0: no answer)."""

    status: int = 0

    def __init__(self, message: str, problems: list[str] | None = None, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.problems = list(problems or [])
        if status:
            self.status = status

    def __str__(self) -> str:
        return "\n  ".join([self.message, *self.problems])


class Unreachable(FlotillaError):
    """The server did not answer (refused, timed out, wrong address)."""


class InvalidSpec(FlotillaError):
    """A job file or spec refused before any request: ``problems`` names each field."""


class BadRequest(FlotillaError):
    """400/422: a malformed body, an unknown queue, an invalid spec or parameter."""


class Unauthorized(FlotillaError):
    """401: no token, or one the server does not know."""


class Forbidden(FlotillaError):
    """403: the token's user lacks the permission the message names."""


class NotFound(FlotillaError):
    """404: no such job, queue, quota, cluster, attempt, or no logs."""


class Conflict(FlotillaError):
    """409: a name taken by an unfinished job, a job that is not waiting, a queue with jobs,
    or a reference that names several jobs (``problems`` lists them)."""


class TooMany(FlotillaError):
    """413/429: a body too large, or too many open event streams."""


class ServerError(FlotillaError):
    """5xx: the server failed or is not ready (503)."""


class WaitTimeout(FlotillaError):
    """``wait`` gave up before the jobs ended; ``states`` holds where each one stood."""

    def __init__(self, message: str, states: dict[str, str]) -> None:
        super().__init__(message)
        self.states = states


ERRORS: dict[int, type[FlotillaError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooMany,
    415: BadRequest,
    422: BadRequest,
    429: TooMany,
}


def error_for(status: int, message: str, problems: list[str]) -> FlotillaError:
    kind = ERRORS.get(status, ServerError if status >= 500 else FlotillaError)
    return kind(message, problems, status)
