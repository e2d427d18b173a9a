"""One error shape for every failure the API reports, so clients need one parser.

Body: ``{"message": "...", "problems": ["jobs[1].tasks[0].resources.cpu: must be >= 0"]}``.
``problems`` lists one ``path: problem`` line per bad field (empty when the error is not
about a field). Store errors map to statuses here, so routes raise and never format.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from flotilla.model.errors import field_path
from flotilla.store import (
    AmbiguousJobError,
    ConflictError,
    DuplicateJobError,
    IllegalTransitionError,
    InvalidJobError,
    NotFoundError,
    StoreError,
)


class ApiError(Exception):
    """An error with its HTTP status; raised by routes, rendered by ``install_handlers``."""

    def __init__(
        self,
        status: int,
        message: str,
        problems: Sequence[str] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.problems = list(problems)
        self.headers = headers


def error_body(message: str, problems: Sequence[str] = ()) -> dict[str, Any]:
    return {"message": message, "problems": list(problems)}


def store_error_status(error: StoreError) -> int:
    if isinstance(error, NotFoundError):
        return 404
    if isinstance(
        error, AmbiguousJobError | DuplicateJobError | ConflictError | IllegalTransitionError
    ):
        return 409
    if isinstance(error, InvalidJobError):
        return 400
    return 500


def validation_problems(errors: Sequence[Any]) -> list[str]:
    """FastAPI's request errors as ``path: problem`` lines (``body.``/``query.`` dropped)."""
    lines: list[str] = []
    for item in errors:
        location = [part for part in item.get("loc", ()) if isinstance(part, str | int)]
        if location and location[0] in ("body", "query", "path", "header"):
            location = location[1:]
        kind = item.get("type")
        if kind == "extra_forbidden":
            text = "unknown field"
        elif kind == "missing":
            text = "required field is missing"
        else:
            text = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        line = f"{field_path(location)}: {text}"
        if line not in lines:
            lines.append(line)
    return lines


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, error: ApiError) -> JSONResponse:
        return JSONResponse(
            error_body(error.message, error.problems), error.status, headers=error.headers
        )

    @app.exception_handler(StoreError)
    async def _store_error(_request: Request, error: StoreError) -> JSONResponse:
        problems = error.problems if isinstance(error, InvalidJobError) else []
        return JSONResponse(error_body(str(error), problems), store_error_status(error))

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_request: Request, error: RequestValidationError) -> JSONResponse:
        problems = validation_problems(error.errors())
        return JSONResponse(error_body("invalid request", problems), 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, error: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(error_body(str(error.detail)), error.status_code, headers=error.headers)
