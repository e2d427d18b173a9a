"""Read a scenario file (YAML or JSON); check what a schema cannot: references and names."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import ValidationError

from flotilla.model.cluster import NodeGroup
from flotilla.model.errors import SpecError, from_pydantic
from flotilla.model.job import dependency_cycles
from flotilla.model.queue import PriorityClass, QueueSpec, QuotaSpec
from flotilla.model.scenario import Scenario

MAX_DOCUMENT_DEPTH = 32
"""How deeply a file (a job file, a fleet, a scenario, a token config) may nest, as the API
allows of a body: a spec needs fewer than 10 levels, and PyYAML's and Python's JSON readers
recurse, failing with a RecursionError traceback past about 1,000."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a mapping with the same key twice (PyYAML keeps the last)
    and a document nested more than ``MAX_DOCUMENT_DEPTH`` levels deep."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DOCUMENT_DEPTH + 1:  # the innermost scalar is no level
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nested more than {MAX_DOCUMENT_DEPTH} levels deep",
                    self.peek_event().start_mark,  # type: ignore[no-untyped-call]
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[object] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _DuplicateKey(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _DuplicateKey(f"duplicate key {key!r}")
        found[key] = value
    return found


def _json_depth(value: Any) -> int:
    """How deeply ``value`` nests lists and mappings (without recursing)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return deepest


def parse_document(text: str, source: str) -> Any:
    """Parse YAML (a superset of JSON) or JSON text; syntax errors, a key given twice in one
    mapping and nesting deeper than ``MAX_DOCUMENT_DEPTH`` become ``SpecError``."""
    deep = f"(top level): nested more than {MAX_DOCUMENT_DEPTH} levels deep"
    if source.endswith(".json"):
        try:
            data = json.loads(text, object_pairs_hook=_unique_pairs)
        except json.JSONDecodeError as error:
            raise SpecError([f"line {error.lineno}: {error.msg}"], source) from None
        except _DuplicateKey as error:
            raise SpecError([f"(top level): {error}"], source) from None
        except RecursionError:
            raise SpecError([deep], source) from None
        if _json_depth(data) > MAX_DOCUMENT_DEPTH:
            raise SpecError([deep], source)
        return data
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as error:
        raise SpecError([str(error).replace("\n", " ")], source) from None


def load_scenario(path: str | Path) -> Scenario:
    """Load and fully validate a scenario file; raise ``SpecError`` naming every problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise SpecError([f"cannot read file: {error.strerror}"], str(path)) from None
    return scenario_from_data(parse_document(text, str(path)), str(path))


def scenario_from_data(data: Any, source: str | None = None) -> Scenario:
    if not isinstance(data, dict):
        raise SpecError(["(top level): a scenario is a mapping of fields"], source)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as error:
        raise from_pydantic(error, source) from None
    problems = check_references(scenario)
    if problems:
        raise SpecError(problems, source)
    return scenario


def walk_quotas(
    quotas: list[QuotaSpec], prefix: str = "quotas"
) -> Iterator[tuple[str, QuotaSpec, QuotaSpec | None]]:
    """Yield (field path, quota, parent) for every node of the quota forest, depth first."""

    def visit(
        nodes: list[QuotaSpec], path: str, parent: QuotaSpec | None
    ) -> Iterator[tuple[str, QuotaSpec, QuotaSpec | None]]:
        for index, quota in enumerate(nodes):
            here = f"{path}[{index}]"
            yield here, quota, parent
            yield from visit(quota.children, f"{here}.children", quota)

    yield from visit(quotas, prefix, None)


def _duplicates(names: list[tuple[str, str]], what: str) -> list[str]:
    seen: dict[str, str] = {}
    problems = []
    for path, name in names:
        if name in seen:
            problems.append(f"{path}: duplicate {what} name {name!r} (first at {seen[name]})")
        else:
            seen[name] = path
    return problems


class _HasNodes(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def nodes(self) -> Sequence[NodeGroup]: ...


def check_fleet_references(
    clusters: Sequence[_HasNodes],
    queues: Sequence[QueueSpec],
    priority_classes: Sequence[PriorityClass],
    quotas: list[QuotaSpec],
) -> list[str]:
    """Cross-field checks of a fleet (a scenario's fleet part, or a fleet file): duplicate
    names, inconsistent quotas, queues naming unknown quotas."""
    problems: list[str] = []
    problems += _duplicates(
        [(f"clusters[{i}].name", c.name) for i, c in enumerate(clusters)], "cluster"
    )
    for ci, cluster in enumerate(clusters):
        problems += _duplicates(
            [
                (f"clusters[{ci}].nodes[{ni}].name", node_name)
                for ni, group in enumerate(cluster.nodes)
                for node_name in group.node_names()
            ],
            "node",
        )
    problems += _duplicates([(f"queues[{i}].name", q.name) for i, q in enumerate(queues)], "queue")
    problems += _duplicates(
        [(f"priority_classes[{i}].name", p.name) for i, p in enumerate(priority_classes)],
        "priority class",
    )
    quota_paths = list(walk_quotas(quotas))
    problems += _duplicates([(f"{path}.name", q.name) for path, q, _ in quota_paths], "quota")
    for path, quota, _ in quota_paths:
        for resource, amount in quota.min.items():
            if quota.max is not None and resource in quota.max and amount > quota.max[resource]:
                problems.append(
                    f"{path}.min.{resource}: {amount:g} is above max {quota.max[resource]:g}"
                )
            if quota.lending_limit is not None and quota.lending_limit.get(resource, 0) > amount:
                problems.append(f"{path}.lending_limit.{resource}: is above min {amount:g}")
        if quota.lending_limit is not None:
            for resource in quota.lending_limit:
                if resource not in quota.min:
                    problems.append(
                        f"{path}.lending_limit.{resource}: the quota has no min for {resource}"
                    )

    quota_names = {q.name for _, q, _ in quota_paths}
    for index, queue in enumerate(queues):
        if queue.quota is not None and queue.quota not in quota_names:
            problems.append(f"queues[{index}].quota: unknown quota {queue.quota!r}")
    return problems


def _check_dependencies(scenario: Scenario, known_jobs: set[str]) -> list[str]:
    """Every ``depends_on`` names a job of the scenario (``NAME`` or ``QUEUE/NAME``), and no
    dependencies form a cycle."""
    problems: list[str] = []
    owner = {name: index for index, job in enumerate(scenario.jobs) for name in job.job_names()}
    edges: dict[int, list[int]] = {}
    for index, job in enumerate(scenario.jobs):
        for position, dependency in enumerate(job.depends_on):
            queue, _, name = dependency.job.rpartition("/")
            target = owner.get(name)
            if target is None or (queue and scenario.jobs[target].queue != queue):
                problems.append(
                    f"jobs[{index}].depends_on[{position}].job: unknown job {dependency.job!r}"
                )
            else:
                edges.setdefault(index, []).append(target)
    for cycle in dependency_cycles(edges):
        names = " → ".join(scenario.jobs[index].name for index in cycle)
        problems.append(f"jobs[{cycle[0]}].depends_on: dependency cycle {names}")
    return problems


def check_references(scenario: Scenario) -> list[str]:
    """Cross-field checks: unknown references, duplicate names, inconsistent quotas."""
    problems = check_fleet_references(
        scenario.clusters, scenario.queues, scenario.priority_classes, scenario.quotas
    )

    queue_names = {q.name for q in scenario.queues}
    class_names = {p.name for p in scenario.priority_classes}
    job_names: list[tuple[str, str]] = []
    gang_members: dict[str, list[int]] = {}
    for index, job in enumerate(scenario.jobs):
        if job.queue not in queue_names:
            problems.append(f"jobs[{index}].queue: unknown queue {job.queue!r}")
        if job.priority_class is not None and job.priority_class not in class_names:
            problems.append(
                f"jobs[{index}].priority_class: unknown priority class {job.priority_class!r}"
            )
        if job.cancel_at is not None and job.cancel_at < job.submit_at:
            problems.append(f"jobs[{index}].cancel_at: is before submit_at ({job.submit_at:g})")
        if job.hold_at is not None and job.hold_at < job.submit_at:
            problems.append(f"jobs[{index}].hold_at: is before submit_at ({job.submit_at:g})")
        if job.release_at is not None and (job.hold_at is None or job.release_at < job.hold_at):
            problems.append(f"jobs[{index}].release_at: needs a hold_at at or before it")
        job_names += [(f"jobs[{index}].name", name) for name in job.job_names()]
        if job.gang is not None and job.gang.name is not None:
            gang_members.setdefault(job.gang.name, []).append(index)
    problems += _duplicates(job_names, "job")
    for gang, indices in gang_members.items():
        queues = {scenario.jobs[i].queue for i in indices}
        if len(queues) > 1:
            problems.append(
                f"jobs[{indices[-1]}].gang.name: gang {gang!r} spans queues "
                f"{', '.join(sorted(queues))}; a gang's jobs must share one queue (and its quota)"
            )
        members = sum(
            sum(t.replicas for t in scenario.jobs[i].tasks) * (scenario.jobs[i].count or 1)
            for i in indices
        )
        wanted = {
            gang_spec.min_member
            for i in indices
            if (gang_spec := scenario.jobs[i].gang) is not None and gang_spec.min_member is not None
        }
        if len(wanted) > 1:
            problems.append(f"jobs[{indices[0]}].gang.min_member: gang {gang!r} disagrees")
        strict = any(
            (gang_spec := scenario.jobs[i].gang) is not None and gang_spec.mode == "strict"
            for i in indices
        )
        for need in wanted:
            if strict and need < members:
                problems.append(
                    f"jobs[{indices[0]}].gang.min_member: gang {gang!r} is strict, so all "
                    f"{members} replicas start together; {need} needs mode non-strict"
                )
            if need is not None and need > members:
                problems.append(
                    f"jobs[{indices[0]}].gang.min_member: gang {gang!r} needs {need} "
                    f"but its jobs have {members} replicas"
                )

    known_jobs = {name for _, name in job_names}
    problems += _check_dependencies(scenario, known_jobs)
    for index, expectation in enumerate(scenario.expect):
        if expectation.job is not None and expectation.job not in known_jobs:
            problems.append(f"expect[{index}].job: unknown job {expectation.job!r}")
        if expectation.queue is not None and expectation.queue not in queue_names:
            problems.append(f"expect[{index}].queue: unknown queue {expectation.queue!r}")
        cluster_names = {c.name for c in scenario.clusters}
        if expectation.cluster is not None and expectation.cluster not in cluster_names:
            problems.append(f"expect[{index}].cluster: unknown cluster {expectation.cluster!r}")
    problems += _check_live(scenario, known_jobs)
    return problems


def _check_live(scenario: Scenario, known_jobs: set[str]) -> list[str]:
    """A live export's jobs name jobs of the scenario, and its running ones their nodes."""
    if scenario.live is None:
        return []
    problems: list[str] = []
    nodes = {
        cluster.name: {name for group in cluster.nodes for name in group.node_names()}
        for cluster in scenario.clusters
    }
    for index, live in enumerate(scenario.live.jobs):
        where = f"live.jobs[{index}]"
        if live.job not in known_jobs:
            problems.append(f"{where}.job: unknown job {live.job!r}")
        if live.running is None:
            continue
        if live.running.cluster not in nodes:
            problems.append(f"{where}.running.cluster: unknown cluster {live.running.cluster!r}")
            continue
        for number, placement in enumerate(live.running.placements):
            node = placement.get("node")
            if node not in nodes[live.running.cluster]:
                problems.append(
                    f"{where}.running.placements[{number}].node: cluster "
                    f"{live.running.cluster} has no node {node!r}"
                )
    return problems
