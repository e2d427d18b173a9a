"""OpenTelemetry traces: off by default; with FLOTILLA_TRACES=console a job's submit,
schedule and dispatch spans are exported, each carrying the job's id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flotilla.tracing import TracingError, configure
from tests.e2e.service import Services, job_spec


def spans(output: str) -> list[dict[str, Any]]:
    """The console exporter's JSON objects, one per span, among the server's other lines."""
    found: list[dict[str, Any]] = []
    decoder = json.JSONDecoder()
    index = output.find("{")
    while index != -1:
        try:
            value, end = decoder.raw_decode(output, index)
        except ValueError:
            index = output.find("{", index + 1)
            continue
        if isinstance(value, dict) and "name" in value and "context" in value:
            found.append(value)
        index = output.find("{", end)
    return found


def test_a_jobs_submit_schedule_and_dispatch_are_traced_with_its_id(
    services: Services, tmp_path: Path
) -> None:
    server = services.start(
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        state_dir=tmp_path / "runs",
        env={"FLOTILLA_TRACES": "console"},
    )
    [job_id] = server.submit(job_spec("traced", "true"))
    assert server.wait_states([job_id]) == {job_id: "succeeded"}
    server.stop()
    assert "traces: console exporter (FLOTILLA_TRACES)" in server.output()
    names = {
        span["name"]
        for span in spans(server.output())
        if job_id in span.get("attributes", {}).get("flotilla.job_ids", [])
    }
    assert names == {"flotilla.submit", "flotilla.schedule", "flotilla.dispatch"}


def test_traces_are_off_by_default_and_an_unknown_exporter_is_refused() -> None:
    assert configure({}) is None
    assert configure({"FLOTILLA_TRACES": "off"}) is None
    with pytest.raises(TracingError, match="FLOTILLA_TRACES=jaeger: unknown exporter"):
        configure({"FLOTILLA_TRACES": "jaeger"})
