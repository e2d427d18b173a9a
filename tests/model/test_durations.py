"""One duration format for every length of time a job spec takes: ``max_runtime: 2h`` was
refused while ``retry.delay: 1h`` was accepted."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from flotilla.model import JobSpec
from flotilla.model.durations import seconds


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90", 90),
        ("2.5", 2.5),
        ("90s", 90),
        ("250ms", 0.25),
        ("5m", 300),
        ("2h", 7200),
        ("1d", 86400),
        ("1h30m", 5400),
        ("1:30:00", 5400),  # Slurm's HH:MM:SS
        ("30:00", 1800),  # Slurm's MM:SS
        ("90:00", 5400),
        ("2-00:00:00", 172800),  # Slurm's D-HH:MM:SS
        ("1-12", 129600),  # D-HH
        (" 2H ", 7200),
    ],
)
def test_every_form_reads_as_seconds(text: str, expected: float) -> None:
    assert seconds(text) == expected


@pytest.mark.parametrize("text", ["soon", "1:70:00", "1:2:3:4", "-5", "2 hours", "h"])
def test_anything_else_is_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a duration .*1:30:00"):
        seconds(text)


def job(text: str) -> JobSpec:
    base = {"name": "train", "queue": "q", "tasks": [{"name": "main", "resources": {"cpu": 1}}]}
    return JobSpec.model_validate({**base, **yaml.safe_load(text)})


def test_max_runtime_gang_timeout_and_retry_take_the_same_forms() -> None:
    spec = job("{max_runtime: 2h, gang: {timeout: '1:30:00'}, retry: {limit: 1, delay: '0:30'}}")
    assert spec.max_runtime == 7200
    assert spec.gang is not None and spec.gang.timeout == 5400
    assert spec.retry is not None and spec.retry.delay == 30
    assert job("max_runtime: 1:30:00").max_runtime == 5400  # YAML's own base-60 integer
    stored = JobSpec.model_validate_json(spec.model_dump_json())
    assert stored.max_runtime == 7200  # kept as seconds


def test_a_bad_max_runtime_names_the_field() -> None:
    with pytest.raises(ValidationError, match="max_runtime") as refused:
        job("max_runtime: two hours")
    assert "is not a duration" in str(refused.value)
    with pytest.raises(ValidationError, match="max_runtime"):
        job("max_runtime: 0s")
