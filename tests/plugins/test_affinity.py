"""node-affinity: required labels filter nodes, preferred labels score them."""

from __future__ import annotations

import pytest

from flotilla.plugins.affinity import NodeAffinity
from tests.builders import cluster, fleet, job, node, scenario
from tests.plugins.helpers import filter_input, rows, score_input

PLUGIN = NodeAffinity()
CLUSTER = cluster(
    "c",
    node("a", labels={"pool": "gpu", "zone": "1"}),
    node("b", labels={"pool": "gpu", "zone": "2"}),
    node("c", labels={"pool": "cpu", "zone": "2"}),
)


def test_required_labels_all_have_to_match() -> None:
    f = fleet(scenario(clusters=[CLUSTER], jobs=[job(node_affinity={"pool": "gpu", "zone": "2"})]))
    assert rows(PLUGIN.filter(filter_input(f.job("j"), f.cluster()))) == [1]


def test_no_required_labels_admits_every_node() -> None:
    f = fleet(scenario(clusters=[CLUSTER], jobs=[job()]))
    assert rows(PLUGIN.filter(filter_input(f.job("j"), f.cluster()))) == [0, 1, 2]


def test_explain_names_the_required_labels() -> None:
    f = fleet(scenario(clusters=[CLUSTER], jobs=[job(node_affinity={"pool": "tpu"})]))
    request = filter_input(f.job("j"), f.cluster())
    assert PLUGIN.explain(request, ~PLUGIN.filter(request)) == (
        "3 nodes without required labels pool=tpu"
    )


def test_preferred_labels_score_the_share_matched() -> None:
    f = fleet(
        scenario(clusters=[CLUSTER], jobs=[job(preferred_nodes={"pool": "gpu", "zone": "2"})])
    )
    scores = PLUGIN.score(score_input(f.job("j"), f.cluster()))
    assert scores.tolist() == pytest.approx([0.5, 1.0, 0.5])


def test_no_preference_has_no_opinion() -> None:
    f = fleet(scenario(clusters=[CLUSTER], jobs=[job()]))
    assert PLUGIN.score(score_input(f.job("j"), f.cluster(), [0, 2])) is None
