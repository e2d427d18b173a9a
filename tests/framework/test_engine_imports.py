"""The engine depends on contracts, never on the plugins and strategies that implement them:
no module of ``flotilla.framework`` or ``flotilla.scheduler`` imports ``flotilla.plugins`` or
``flotilla.strategies`` (not even lazily, inside a function), so any built-in plugin can be
replaced by a third-party one that implements the same protocols. What the engine needs from
a plugin (the quota state that ``PreemptionContext`` reports) the plugin publishes through a
framework type (``CycleState.quota``)."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

import flotilla.framework
import flotilla.scheduler

IMPLEMENTATIONS = ("flotilla.plugins", "flotilla.strategies")


def _sources(package: ModuleType) -> list[Path]:
    return [
        Path(package.__path__[0]) / f"{info.name}.py"
        for info in pkgutil.iter_modules(package.__path__)
    ]


def _imported(source: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize(
    "source",
    _sources(flotilla.framework) + _sources(flotilla.scheduler),
    ids=lambda path: f"{path.parent.name}/{path.name}",
)
def test_the_engine_imports_no_plugin_or_strategy(source: Path) -> None:
    leaks = sorted(
        name
        for name in _imported(source)
        if any(name == top or name.startswith(f"{top}.") for top in IMPLEMENTATIONS)
    )
    assert leaks == []
