"""The ``retry`` and ``array`` parts of a job spec: parsing, defaults, refusals."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from flotilla.model import JobSpec, RetryCause


def job(text: str) -> JobSpec:
    base = {"name": "train", "queue": "q", "tasks": [{"name": "main", "resources": {"cpu": 1}}]}
    return JobSpec.model_validate({**base, **yaml.safe_load(text)})


def test_on_written_unquoted_in_yaml_names_the_causes() -> None:
    spec = job("retry: {limit: 2, on: [failed, node_failure]}")
    assert spec.retry is not None
    assert spec.retry.on == [RetryCause.FAILED, RetryCause.NODE_FAILURE]
    as_json = JobSpec.model_validate_json(spec.model_dump_json())
    assert as_json.retry == spec.retry


def test_backoff_delays_by_kind() -> None:
    exponential = job("retry: {limit: 9, delay: 10s, max_delay: 1m}").retry
    assert exponential is not None
    assert [exponential.delay_after(n) for n in (1, 2, 3, 4)] == [10, 20, 40, 60]
    fixed = job("retry: {limit: 9, backoff: fixed, delay: 1.5m}").retry
    assert fixed is not None and fixed.delay_after(5) == 90
    none = job("retry: {limit: 9, backoff: none}").retry
    assert none is not None and none.delay_after(3) == 0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("retry: {limit: -1}", "limit"),
        ("retry: {limit: 1, delay: soon}", "'soon' is not a duration"),
        ("retry: {limit: 1, on: [crashed]}", "on"),
        ("array: {size: 0}", "size"),
        ("array: {size: 2, parallelism: 0}", "parallelism"),
        ("{count: 2, array: {size: 2}}", "array and count: give one, not both"),
    ],
)
def test_bad_retry_and_array_settings_are_refused_naming_the_field(text: str, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        job(text)


def test_an_array_names_its_elements_like_count() -> None:
    assert job("array: {size: 3, parallelism: 1}").job_names() == ["train-0", "train-1", "train-2"]
