"""A new filter plugin is one small file (``maintenance_plugin.py``: filter, explain and score
only), registered by entry point exactly as a third-party package registers it, and works
next to the built-in plugins and the engine's fast paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from flotilla.framework.registry import Framework, available
from flotilla.scheduler import SchedulingAlgorithm, SchedulingConfig
from tests.builders import cluster, job, jobs, nodes, scenario, simulate_report


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Install the plugin's distribution metadata: an entry point in ``flotilla.plugins``."""
    info = tmp_path / "maintenance_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: maintenance-plugin\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(
        "[flotilla.plugins]\n"
        "keep-off-maintenance = tests.framework.maintenance_plugin:KeepOffMaintenance\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))


def _fleet(big: int) -> dict[str, object]:
    """``big`` plain nodes (enough for the best-node index), one fast node, two under
    maintenance, all 8-CPU."""
    return cluster(
        "east",
        nodes(big, name="plain", cpu=8),
        nodes(1, name="fast", cpu=8, labels={"fast": "true"}),
        nodes(2, name="down", cpu=8, labels={"maintenance": "true"}),
    )


@pytest.mark.usefixtures("installed")
def test_a_plugin_registered_by_entry_point_filters_scores_and_explains() -> None:
    assert "keep-off-maintenance" in available("flotilla.plugins")
    data = scenario(
        clusters=[_fleet(600)],
        jobs=[
            job("first", cpu=8, duration=100),
            jobs("rest", n=600, cpu=8, duration=100, submit_at=1),
            job("too-big", cpu=16, submit_at=2),
        ],
        settings={"plugins": {"enabled": ["keep-off-maintenance"]}},
    )
    report = simulate_report(data, until=50)
    # Its score sends the first job to the fast node (bin-packing alone picks the first row).
    assert report.nodes_of("first") == ["fast-0"]
    # Its filter keeps everything off the nodes under maintenance: 601 nodes, 601 jobs.
    placed = {node for name in report.running() for node in report.nodes_of(name)}
    assert len(report.running()) == 601
    assert not any(node.startswith("down") for node in placed)
    assert report.state("rest-599") == "running"
    # Its explanation is part of the reason the built-in filters give.
    reason = report.job("too-big")["reason"]
    assert "2 nodes are under maintenance" in reason
    assert "no node has 16 cpu at all" in reason


@pytest.mark.usefixtures("installed")
def test_the_engine_scans_for_a_profile_with_a_plugin_that_is_not_row_local() -> None:
    framework = Framework.from_profile(enabled=["keep-off-maintenance"])
    algorithm = SchedulingAlgorithm(SchedulingConfig(), framework=framework)
    assert not framework.row_local and not algorithm.caches.row_local
    assert Framework.from_profile().row_local
