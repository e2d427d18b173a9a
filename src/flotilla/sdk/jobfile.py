"""Job files and specs as submission bodies, checked with the server's own rules first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from flotilla.api.submission import InvalidSubmission, parse_submission
from flotilla.model.errors import SpecError
from flotilla.model.loader import parse_document
from flotilla.sdk.errors import InvalidSpec

Spec = Mapping[str, Any] | BaseModel
"""One job spec: a mapping as in a job file, or a ``flotilla.model.JobSpec``."""

Submission = Spec | Sequence[Spec] | str | PathLike[str]
"""What ``submit`` takes: a spec, a list of specs, or the path of a job file."""


def read_job_file(path: str | PathLike[str]) -> dict[str, Any]:
    """The submission body of a job file (YAML or JSON): one job, a list, or ``{jobs:
    [...]}``. Raises ``InvalidSpec`` naming the file and every bad field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidSpec(f"{path}: cannot read: {error.strerror or error}") from None
    return read_job_text(text, str(path))


def read_job_text(text: str, where: str) -> dict[str, Any]:
    """The submission body of a job file's text (``where``: its name in messages, e.g.
    ``<stdin>``)."""
    try:
        # As a fleet file is read: a key given twice is refused (PyYAML keeps the last one
        # silently), and so is nesting past the API's depth (a RecursionError otherwise).
        data = parse_document(text, where)
    except SpecError as error:
        raise InvalidSpec(f"{where}: not valid YAML or JSON", error.problems) from None
    return checked(data, f"{where}: ")


def _as_data(spec: Spec) -> Any:
    if isinstance(spec, BaseModel):
        return spec.model_dump(mode="json", exclude_none=True)
    return dict(spec)


def submission_body(submission: Submission) -> dict[str, Any]:
    """The body of ``POST /v1/jobs`` for what ``submit`` was given, checked."""
    if isinstance(submission, str | PathLike):
        return read_job_file(submission)
    if isinstance(submission, Mapping | BaseModel):
        return checked(_as_data(submission), "")
    return checked([_as_data(spec) for spec in submission], "")


def checked(data: Any, where: str) -> dict[str, Any]:
    """``data`` (one job, a list, or ``{jobs: [...]}``) as a body the server's rules accept."""
    body: Any = {"jobs": data} if isinstance(data, list) else data
    try:
        parse_submission(body)
    except InvalidSubmission as error:
        raise InvalidSpec(f"{where}{error.message}", error.problems) from None
    return dict(body)
