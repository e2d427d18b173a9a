"""Validation errors that name the field path (``jobs[3].tasks[0].resources.cpu: …``)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError


class SpecError(ValueError):
    """Invalid user input. ``problems`` holds one ``path: message`` line per problem."""

    def __init__(self, problems: Sequence[str], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(where + "invalid scenario\n  " + "\n  ".join(self.problems))


def field_path(location: Sequence[int | str]) -> str:
    """``('jobs', 3, 'tasks', 0, 'cpu')`` → ``jobs[3].tasks[0].cpu``."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "(top level)"


def _message(error: dict[str, object]) -> str:
    kind = error.get("type")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field is missing"
    text = str(error.get("msg", "invalid"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text


def from_pydantic(error: ValidationError, source: str | None = None) -> SpecError:
    """Turn pydantic's errors into ``path: problem`` lines, dropping union-branch noise."""
    problems: list[str] = []
    for item in error.errors():
        # Tagged/union branches append type names ("float", "literal['end']") to the loc.
        location = [
            part
            for part in item["loc"]
            if not (isinstance(part, str) and ("[" in part or part in ("float", "int", "str")))
        ]
        line = f"{field_path(location)}: {_message(dict(item))}"
        if line not in problems:
            problems.append(line)
    return SpecError(problems, source)
