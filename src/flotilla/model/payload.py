"""Typed job payloads: what a backend needs to start a job of a given ``type``.

A ``JobSpec`` carries ``type`` (the discriminator) and a free-form ``payload`` dict; this module
turns the pair into a typed, strictly validated model. ``command`` runs everywhere;
``container`` (an image) runs on the ``kubernetes`` backend; ``ray`` (a Ray job: an entrypoint
and its ``runtime_env``) runs on the ``ray`` backend. The other job types Flotilla is designed
for (``spark``) have their place in
``PLANNED_TYPES`` so that a job using one is refused with a message saying so, rather than with
a puzzling "unknown field".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator

from flotilla.model.base import Seconds, Strict
from flotilla.model.errors import from_pydantic


class PayloadError(ValueError):
    """An invalid or unsupported payload. ``problems``: one ``payload.field: message`` each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid payload: " + "; ".join(self.problems))


class StrictPayload(Strict):
    """Payloads are strict as well as closed: ``"1"`` is not a number, ``1`` is not a string."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SimBehaviour(StrictPayload):
    """How the job behaves on the ``sim`` backend; real backends ignore it.

    Lives in the payload so that one job file runs unchanged on ``sim`` (demos, load tests) and
    on a real backend.
    """

    duration: Seconds = 1.0
    exit_code: int = Field(default=0, ge=-255, le=255)
    output: list[str] = []
    """Lines the fake run writes to stdout when it starts."""
    sigterm_delay: Seconds = 0.0
    """How long the fake process takes to exit after SIGTERM (beyond the grace period: killed)."""


class CommandPayload(StrictPayload):
    """A plain command, run once per replica.

    ``command`` as a list is executed directly (no shell, no quoting surprises); as a string it
    is run by ``/bin/sh -c``.
    """

    type: Literal["command"] = "command"
    command: list[str] | str
    env: dict[str, str] = {}
    working_dir: str | None = None
    sim: SimBehaviour | None = None

    @field_validator("command")
    @classmethod
    def _not_empty(cls, command: list[str] | str) -> list[str] | str:
        if isinstance(command, str) and not command.strip():
            raise ValueError("must not be empty")
        if isinstance(command, list) and (not command or not command[0]):
            raise ValueError("must name a program as its first element")
        return command

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        return _check_env_names(env)

    def argv(self) -> list[str]:
        if isinstance(self.command, str):
            return ["/bin/sh", "-c", self.command]
        return list(self.command)


class ContainerPayload(StrictPayload):
    """A container image, run once per replica (by the ``kubernetes`` backend).

    ``command`` replaces the image's entrypoint and ``args`` its arguments, as in a Kubernetes
    container; both omitted runs the image as built. A string ``command`` runs by
    ``/bin/sh -c`` inside the image.
    """

    type: Literal["container"] = "container"
    image: str = Field(min_length=1, pattern=r"^[^\s]+$")
    command: list[str] | str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    working_dir: str | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    sim: SimBehaviour | None = None

    @field_validator("command")
    @classmethod
    def _not_empty(cls, command: list[str] | str | None) -> list[str] | str | None:
        if command is None:
            return None
        return CommandPayload._not_empty(command)

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        return CommandPayload._env_names(env)

    def argv(self) -> list[str] | None:
        """The container's ``command`` (entrypoint override), or ``None`` for the image's."""
        if self.command is None:
            return None
        if isinstance(self.command, str):
            return ["/bin/sh", "-c", self.command]
        return list(self.command)


class RayRuntimeEnv(StrictPayload):
    """The part of Ray's ``runtime_env`` Flotilla passes on (the rest is refused, not dropped).

    ``working_dir``: a directory on the machine that submits the job (the scheduler; Ray's
    client packs and uploads it) or a remote archive URI (``s3://…/code.zip``, ``https://…``).
    ``pip``: requirement specifiers Ray installs in a fresh virtualenv on the node.
    """

    working_dir: str | None = None
    env_vars: dict[str, str] = {}
    pip: list[Annotated[str, Field(min_length=1)]] | None = None

    @field_validator("working_dir")
    @classmethod
    def _working_dir(cls, working_dir: str | None) -> str | None:
        if working_dir is not None and not working_dir.strip():
            raise ValueError("must not be empty")
        return working_dir

    @field_validator("env_vars")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        return _check_env_names(env)


class RayPayload(StrictPayload):
    """A Ray job: ``entrypoint`` is the shell command Ray's job supervisor runs (typically
    ``python train.py``, a driver that calls ``ray.init()``), once per replica."""

    type: Literal["ray"] = "ray"
    entrypoint: str
    runtime_env: RayRuntimeEnv = RayRuntimeEnv()
    sim: SimBehaviour | None = None

    @field_validator("entrypoint")
    @classmethod
    def _not_empty(cls, entrypoint: str) -> str:
        if not entrypoint.strip():
            raise ValueError("must not be empty")
        return entrypoint


def _check_env_names(env: dict[str, str]) -> dict[str, str]:
    for name in env:
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"{name!r} is not a valid environment variable name")
    return env


Payload = CommandPayload | ContainerPayload | RayPayload
"""Every payload type a backend can run today."""

PAYLOAD_TYPES: Mapping[str, type[CommandPayload] | type[ContainerPayload] | type[RayPayload]] = {
    "command": CommandPayload,
    "container": ContainerPayload,
    "ray": RayPayload,
}

PLANNED_TYPES: Mapping[str, str] = {
    "spark": "Spark jobs need a spark-submit payload, which is not built yet",
}


def parse_payload(job_type: str, data: Mapping[str, Any] | None) -> Payload:
    """Validate ``data`` as the payload of a job of ``job_type``.

    Raises ``PayloadError`` naming each bad field (``payload.command: required field is
    missing``), or saying that the type is planned but unsupported, or unknown.
    """
    if job_type in PLANNED_TYPES:
        supported = ", ".join(PAYLOAD_TYPES)
        raise PayloadError(
            [
                f"type: {job_type!r} is not supported yet ({PLANNED_TYPES[job_type]}; "
                f"supported: {supported})"
            ]
        )
    if job_type not in PAYLOAD_TYPES:
        known = ", ".join([*PAYLOAD_TYPES, *(f"{name} (planned)" for name in PLANNED_TYPES)])
        raise PayloadError([f"type: unknown job type {job_type!r} (known: {known})"])
    if data is None:
        raise PayloadError([f"payload: a {job_type} job needs a payload"])
    if not isinstance(data, Mapping):
        raise PayloadError(["payload: must be a mapping"])
    fields = dict(data)
    declared = fields.pop("type", job_type)
    if declared != job_type:
        raise PayloadError([f"payload.type: {declared!r} disagrees with the job type {job_type!r}"])
    try:
        return PAYLOAD_TYPES[job_type].model_validate(fields)
    except ValidationError as error:
        problems = from_pydantic(error).problems
        raise PayloadError([_under("payload", line) for line in problems]) from None


def parse_sim_behaviour(data: Mapping[str, Any] | None) -> SimBehaviour | None:
    """The ``sim`` section of a payload alone, for backends that need nothing else."""
    if data is None or data.get("sim") is None:
        return None
    try:
        return SimBehaviour.model_validate(data["sim"])
    except ValidationError as error:
        problems = from_pydantic(error).problems
        raise PayloadError([_under("payload.sim", line) for line in problems]) from None


def _under(prefix: str, line: str) -> str:
    """Re-root a ``field: message`` line under ``prefix`` so it names the payload field."""
    if line.startswith("(top level)"):
        return prefix + line[len("(top level)") :]
    if line.startswith("["):
        return prefix + line
    return f"{prefix}.{line}"
