"""taint-toleration: hard taints (NoSchedule, NoExecute) admit only jobs that tolerate them."""

from __future__ import annotations

import pytest

from flotilla.model import Taint, TaintEffect, Toleration
from flotilla.plugins.taints import TaintToleration, tolerates
from tests.builders import cluster, fleet, job, node, scenario, toleration
from tests.plugins.helpers import filter_input, rows

INFRA = Taint(key="dedicated", value="infra", effect=TaintEffect.NO_SCHEDULE)


def test_equal_without_a_value_tolerates_a_taint_with_an_empty_value() -> None:
    bare = Taint(key="dedicated", value="", effect=TaintEffect.NO_SCHEDULE)
    assert tolerates(Toleration(key="dedicated"), bare)


@pytest.mark.parametrize(
    ("tol", "expected"),
    [
        (Toleration(key="dedicated", value="infra"), True),
        (Toleration(key="dedicated", value="infra", effect=TaintEffect.NO_SCHEDULE), True),
        (Toleration(key="dedicated"), False),  # Equal without value: only an empty value
        (Toleration(key="dedicated", operator="Exists"), True),  # Exists: any value
        (Toleration(key="dedicated", operator="Exists"), True),
        (Toleration(operator="Exists"), True),  # empty key + Exists: every taint
        (Toleration(key="dedicated", value="batch"), False),
        (Toleration(key="other", operator="Exists"), False),
        (Toleration(key="dedicated", operator="Exists", effect=TaintEffect.NO_EXECUTE), False),
        (Toleration(), False),  # empty key with Equal matches nothing
    ],
)
def test_toleration_matching(tol: Toleration, expected: bool) -> None:
    assert tolerates(tol, INFRA) is expected


TAINTED = cluster(
    "c",
    node("plain"),
    node("infra", taints=["dedicated=infra:NoSchedule"]),
    node("gpu", taints=["gpu=true:NoExecute"]),
    node("spot", taints=["spot=true:PreferNoSchedule"]),
)


def test_untolerated_hard_taints_filter_nodes_out_and_soft_ones_do_not() -> None:
    f = fleet(scenario(clusters=[TAINTED], jobs=[job()]))
    assert rows(TaintToleration().filter(filter_input(f.job("j"), f.cluster()))) == [0, 3]


def test_a_node_is_admitted_only_when_all_its_hard_taints_are_tolerated() -> None:
    f = fleet(
        scenario(
            clusters=[cluster("c", node("both", taints=["a=1:NoSchedule", "b=2:NoExecute"]))],
            jobs=[
                job("one", tolerations=[toleration("a", "1")]),
                job("two", tolerations=[toleration("a", "1"), toleration("b", operator="Exists")]),
            ],
        )
    )
    plugin = TaintToleration()
    assert rows(plugin.filter(filter_input(f.job("one"), f.cluster()))) == []
    assert rows(plugin.filter(filter_input(f.job("two"), f.cluster()))) == [0]


def test_explain_names_the_untolerated_taints() -> None:
    f = fleet(scenario(clusters=[TAINTED], jobs=[job(tolerations=[toleration("gpu", "true")])]))
    request = filter_input(f.job("j"), f.cluster())
    plugin = TaintToleration()
    assert plugin.explain(request, ~plugin.filter(request)) == (
        "1 node with untolerated taint dedicated=infra:NoSchedule"
    )
