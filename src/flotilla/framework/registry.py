"""Loading plugins and strategies by entry point, and assembling profiles.

Built-in plugins and strategies are registered in Flotilla's own ``pyproject.toml`` under the
same entry-point groups a third-party package uses, so there is one loading path for all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any

from flotilla.framework.interfaces import (
    AssignmentStrategy,
    CycleStartPlugin,
    FilterPlugin,
    PermitPlugin,
    PostFilterPlugin,
    PostFilterPrecheck,
    PreBindPlugin,
    PreFilterPlugin,
    QueueSortPlugin,
    ReservePlugin,
    RowLocalFilter,
    RowLocalScore,
    RunningSetPlugin,
    ScorePlugin,
    WaitingPlugin,
)

PLUGIN_GROUP = "flotilla.plugins"
STRATEGY_GROUP = "flotilla.strategies"

_BASE = (
    "priority-sort",
    "elastic-quota",
    "owner-limits",
    "resources-fit",
    "node-affinity",
    "taint-toleration",
    "gpu-devices",
)

PROFILES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        # Bin-packing keeps whole nodes free for big gangs; on GPU clusters the fragmentation-aware
        # score packs GPUs (FGD) first. Exactly bin-packing on clusters without GPUs.
        "default": (*_BASE, "gpu-fragmentation", "queue-preemption"),
        # The same, by the name that says what it does.
        "gpu-packing": (*_BASE, "gpu-fragmentation", "queue-preemption"),
        # Plain bin-packing everywhere, GPU clusters included (no fragmentation-aware score).
        "binpack": (*_BASE, "binpack", "queue-preemption"),
        # Spreading lowers the blast radius of a node failure at the cost of fragmentation.
        "spread": (*_BASE, "spread", "queue-preemption"),
    }
)


class UnknownExtension(LookupError):
    """A configured plugin, strategy or profile name that nothing provides."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        self.kind, self.name = kind, name
        self.known = sorted(known)
        super().__init__(f"unknown {kind} {name!r} (known: {', '.join(self.known) or 'none'})")


def available(group: str) -> dict[str, Callable[..., Any]]:
    """Entry points of ``group`` by name, not yet loaded."""
    return {point.name: point.load for point in entry_points(group=group)}


def _load(group: str, kind: str, name: str) -> Any:
    points = available(group)
    if name not in points:
        raise UnknownExtension(kind, name, points)
    return points[name]()


def load_strategy(name: str) -> AssignmentStrategy:
    factory = _load(STRATEGY_GROUP, "assignment strategy", name)
    strategy: AssignmentStrategy = factory()
    return strategy


def load_plugin(name: str) -> object:
    factory = _load(PLUGIN_GROUP, "plugin", name)
    return factory()


def profile_plugin_names(
    profile: str = "default", enabled: Iterable[str] = (), disabled: Iterable[str] = ()
) -> list[str]:
    if profile not in PROFILES:
        raise UnknownExtension("profile", profile, PROFILES)
    disabled = set(disabled)
    names = [name for name in PROFILES[profile] if name not in disabled]
    names += [name for name in enabled if name not in names and name not in disabled]
    return names


@dataclass(frozen=True)
class Framework:
    """The plugins of one profile, sorted by extension point, in configured order."""

    plugins: tuple[object, ...]

    @classmethod
    def from_profile(
        cls, profile: str = "default", enabled: Iterable[str] = (), disabled: Iterable[str] = ()
    ) -> Framework:
        names = profile_plugin_names(profile, enabled, disabled)
        return cls(tuple(load_plugin(name) for name in names))

    def _having(self, protocol: type) -> list[Any]:
        return [plugin for plugin in self.plugins if isinstance(plugin, protocol)]

    @cached_property
    def queue_sort(self) -> QueueSortPlugin:
        sorters = self._having(QueueSortPlugin)
        if len(sorters) != 1:
            names = [p.name for p in sorters]
            raise ValueError(f"a profile needs exactly one QueueSort plugin, found {names}")
        sorter: QueueSortPlugin = sorters[0]
        return sorter

    @cached_property
    def pre_filters(self) -> list[PreFilterPlugin]:
        return self._having(PreFilterPlugin)

    @cached_property
    def filters(self) -> list[FilterPlugin]:
        return self._having(FilterPlugin)

    @cached_property
    def scores(self) -> list[ScorePlugin]:
        return self._having(ScorePlugin)

    @cached_property
    def reserves(self) -> list[ReservePlugin]:
        return self._having(ReservePlugin)

    @cached_property
    def permits(self) -> list[PermitPlugin]:
        return self._having(PermitPlugin)

    @cached_property
    def pre_binds(self) -> list[PreBindPlugin]:
        return self._having(PreBindPlugin)

    @cached_property
    def post_filters(self) -> list[PostFilterPlugin]:
        return self._having(PostFilterPlugin)

    @cached_property
    def cycle_starts(self) -> list[CycleStartPlugin]:
        return self._having(CycleStartPlugin)

    @cached_property
    def running_sets(self) -> list[RunningSetPlugin]:
        return self._having(RunningSetPlugin)

    @cached_property
    def waiting(self) -> list[WaitingPlugin]:
        return self._having(WaitingPlugin)

    @cached_property
    def row_filters(self) -> list[RowLocalFilter]:
        """The filters that are row-local (all of them in a row-local profile)."""
        return [plugin for plugin in self.filters if isinstance(plugin, RowLocalFilter)]

    @cached_property
    def row_scores(self) -> list[RowLocalScore]:
        """The scores that are row-local (all of them in a row-local profile)."""
        return [plugin for plugin in self.scores if isinstance(plugin, RowLocalScore)]

    @cached_property
    def row_local(self) -> bool:
        """Every filter is a ``RowLocalFilter`` and every score a ``RowLocalScore``: the
        engine may then remember failures and keep best-node indexes (``scheduler.caches``)."""
        return len(self.row_filters) == len(self.filters) and len(self.row_scores) == len(
            self.scores
        )

    @cached_property
    def post_filter_prechecks(self) -> list[tuple[PostFilterPlugin, PostFilterPrecheck | None]]:
        """Each PostFilter with itself again when it can tell ahead that it will not act
        for a queue (``PostFilterPrecheck``), else with ``None``."""
        return [
            (plugin, plugin if isinstance(plugin, PostFilterPrecheck) else None)
            for plugin in self.post_filters
        ]
