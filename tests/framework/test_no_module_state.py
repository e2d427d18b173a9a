"""The engine's speed machinery has one home (``scheduler.caches``): no module of the
framework or of the built-in plugins holds mutable state of its own, so two schedulers in one
process — or a test and the next — can never see each other's caches."""

from __future__ import annotations

import importlib
import itertools
import pkgutil
from collections import OrderedDict
from types import ModuleType

import pytest

import flotilla.framework
import flotilla.plugins

MUTABLE = (dict, list, set, bytearray, OrderedDict, itertools.count)


def _modules(package: ModuleType) -> list[str]:
    return [f"{package.__name__}.{info.name}" for info in pkgutil.iter_modules(package.__path__)]


ENGINE_MACHINERY = [
    f"flotilla.scheduler.{name}" for name in ("caches", "failures", "node_index", "placement")
]


@pytest.mark.parametrize(
    "name", _modules(flotilla.framework) + _modules(flotilla.plugins) + ENGINE_MACHINERY
)
def test_no_module_holds_mutable_state(name: str) -> None:
    module = importlib.import_module(name)
    held = {
        attribute: type(value).__name__
        for attribute, value in vars(module).items()
        if isinstance(value, MUTABLE) and not attribute.startswith("__")
    }
    assert held == {}
