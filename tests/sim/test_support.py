"""Features not built yet are refused with exit 2 naming the field, never silently ignored."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flotilla.cli.main import app
from flotilla.model import SpecError
from tests.builders import Data, cluster, job, load, nodes, run, scenario


def with_(**extra: object) -> Data:
    base = scenario(clusters=[cluster("c", nodes(2, cpu=8, gpu=2))], jobs=[job(replicas=2)])
    base.update(extra)  # type: ignore[arg-type]
    return base


def gang(**spec: object) -> Data:
    data = with_()
    data["jobs"][0]["gang"] = spec
    return data


REFUSED = [
    (
        with_(settings={"queueing": "backfill"}),
        "settings.queueing: backfill is not implemented yet",
    ),
    (
        with_(settings={"fair_share_preemption": True}),
        "settings.fair_share_preemption: preemption is not implemented yet",
    ),
    (
        with_(settings={"priority_preemption": True}),
        "settings.priority_preemption: preemption is not implemented yet",
    ),
    (
        with_(quotas=[{"name": "org", "min": {"cpu": 4}}]),
        "quotas: the elastic quota tree is not enforced yet",
    ),
    (
        with_(queues=[{"name": "q", "preemption": {"within_queue": "lower_priority"}}]),
        "queues[0].preemption: preemption is not implemented yet",
    ),
    (
        with_(
            queues=[
                {"name": "q", "preemption": {"borrow_within_cohort": {"policy": "lower_priority"}}}
            ]
        ),
        "queues[0].preemption: preemption is not implemented yet",
    ),
    (gang(name="shared"), "jobs[0].gang.name: gangs across jobs are not implemented yet"),
    (
        gang(min_member=1, mode="non-strict"),
        "jobs[0].gang.mode: non-strict gangs are not implemented yet",
    ),
]


@pytest.mark.parametrize(("data", "problem"), REFUSED, ids=[p.split(":")[0] for _, p in REFUSED])
def test_unbuilt_feature_is_refused_naming_the_field(data: Data, problem: str) -> None:
    spec = load(data)  # valid input: the model accepts it
    with pytest.raises(SpecError) as caught:
        run(data)
    assert problem in caught.value.problems
    del spec


def test_gpu_topology_scope_is_refused() -> None:
    data = with_()
    data["jobs"][0]["tasks"][0]["topology"] = {"gpu": "numa"}
    with pytest.raises(SpecError) as caught:
        run(data)
    assert caught.value.problems == [
        "jobs[0].tasks[0].topology: GPU topology scopes are not implemented yet"
    ]


def test_non_strict_gang_needing_every_member_is_a_strict_gang_and_runs() -> None:
    assert run(gang(min_member=2, mode="non-strict")).end_reason


def test_refusal_exits_2_from_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(with_(settings={"queueing": "backfill"})))
    result = CliRunner().invoke(app, ["simulate", str(path)])
    assert result.exit_code == 2
    assert "settings.queueing: backfill is not implemented yet" in result.stderr
