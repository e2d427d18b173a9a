"""Typed payloads: what a command job may say, and clear refusals naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from flotilla.model.payload import (
    CommandPayload,
    ContainerPayload,
    PayloadError,
    RayPayload,
    parse_payload,
)


def problems(job_type: str, data: Any) -> list[str]:
    with pytest.raises(PayloadError) as caught:
        parse_payload(job_type, data)
    return caught.value.problems


def test_a_list_command_runs_as_given_and_a_string_through_the_shell() -> None:
    listed = parse_payload("command", {"command": ["python", "-c", "print(1)"]})
    shell = parse_payload("command", {"command": "echo $HOME | wc -c", "env": {"A": "1"}})
    assert listed.argv() == ["python", "-c", "print(1)"]
    assert shell.argv() == ["/bin/sh", "-c", "echo $HOME | wc -c"]
    assert shell.env == {"A": "1"}
    assert isinstance(shell, CommandPayload)


def test_errors_name_the_field() -> None:
    assert problems("command", {}) == ["payload.command: required field is missing"]
    assert problems("command", {"command": "x", "cwd": "/"}) == ["payload.cwd: unknown field"]
    assert problems("command", {"command": []}) == [
        "payload.command: must name a program as its first element"
    ]
    assert problems("command", {"command": "  "}) == ["payload.command: must not be empty"]
    assert problems("command", {"command": "x", "env": {"A": 1}}) == [
        "payload.env.A: Input should be a valid string"
    ]
    assert problems("command", {"command": "x", "sim": {"duration": -1}})[0].startswith(
        "payload.sim.duration"
    )
    assert problems("command", None) == ["payload: a command job needs a payload"]


def test_values_are_not_coerced() -> None:
    assert problems("command", {"command": "x", "working_dir": 5})[0].startswith(
        "payload.working_dir"
    )


def test_planned_types_are_refused_saying_they_are_not_built_yet() -> None:
    for job_type in ("spark",):
        (line,) = problems(job_type, {"entrypoint": "x"})
        assert line.startswith(f"type: {job_type!r} is not supported yet")
        assert "supported: command, container, ray" in line


def test_a_container_payload_needs_an_image_and_takes_a_command_and_args() -> None:
    payload = parse_payload(
        "container", {"image": "busybox:1.36", "command": "echo $A", "args": ["x"]}
    )
    assert isinstance(payload, ContainerPayload)
    assert payload.argv() == ["/bin/sh", "-c", "echo $A"]
    assert parse_payload("container", {"image": "busybox:1.36"}).argv() is None  # type: ignore[union-attr]
    assert problems("container", {"command": ["run"]}) == [
        "payload.image: required field is missing"
    ]
    assert problems("container", {"image": "a b"})[0].startswith("payload.image")
    assert problems("container", {"image": "x", "command": []})[0].startswith("payload.command")
    assert problems("container", {"image": "x", "image_pull_policy": "Sometimes"})[0].startswith(
        "payload.image_pull_policy"
    )


def test_unknown_types_list_the_known_ones() -> None:
    (line,) = problems("mpi", {"command": "x"})
    assert "unknown job type 'mpi'" in line
    assert "command" in line and "ray" in line and "spark (planned)" in line


def test_a_payload_type_must_agree_with_the_job_type() -> None:
    assert parse_payload("command", {"type": "command", "command": "x"}).command == "x"
    (line,) = problems("command", {"type": "ray", "command": "x"})
    assert line.startswith("payload.type")


def test_a_ray_job_has_an_entrypoint_and_a_runtime_env() -> None:
    payload = parse_payload(
        "ray",
        {
            "entrypoint": "python train.py --epochs 3",
            "runtime_env": {
                "working_dir": "./code",
                "env_vars": {"EPOCHS": "3"},
                "pip": ["torch==2.9.0", "numpy"],
            },
        },
    )
    assert isinstance(payload, RayPayload)
    assert payload.entrypoint == "python train.py --epochs 3"
    assert payload.runtime_env.working_dir == "./code"
    assert payload.runtime_env.env_vars == {"EPOCHS": "3"}
    assert payload.runtime_env.pip == ["torch==2.9.0", "numpy"]
    bare = parse_payload("ray", {"entrypoint": "python -c 'import ray; ray.init()'"})
    assert isinstance(bare, RayPayload) and bare.runtime_env.pip is None


def test_ray_payload_errors_name_the_field() -> None:
    assert problems("ray", {}) == ["payload.entrypoint: required field is missing"]
    assert problems("ray", {"entrypoint": " "}) == ["payload.entrypoint: must not be empty"]
    assert problems("ray", {"entrypoint": "x", "runtime_env": {"conda": "env"}}) == [
        "payload.runtime_env.conda: unknown field"
    ]
    assert problems("ray", {"entrypoint": "x", "runtime_env": {"env_vars": {"A=B": "1"}}}) == [
        "payload.runtime_env.env_vars: 'A=B' is not a valid environment variable name"
    ]
    assert problems("ray", {"entrypoint": "x", "runtime_env": {"pip": ["ok", ""]}})[0].startswith(
        "payload.runtime_env.pip[1]"
    )
    assert problems("ray", {"entrypoint": "x", "runtime_env": {"working_dir": 3}})[0].startswith(
        "payload.runtime_env.working_dir"
    )
    assert sorted(problems("ray", {"command": "x"})) == [
        "payload.command: unknown field",
        "payload.entrypoint: required field is missing",
    ]
