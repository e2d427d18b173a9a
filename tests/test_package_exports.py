"""The packages whose names are imported on first use (``flotilla.model``,
``flotilla.lifecycle``, ``flotilla.sdk``: PEP 562, so a client command imports only what it
runs) still export every name they list, and only those."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

import flotilla
import flotilla.lifecycle
import flotilla.model
import flotilla.sdk

PACKAGES = [flotilla, flotilla.model, flotilla.lifecycle, flotilla.sdk]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda package: package.__name__)
def test_every_listed_name_resolves_to_the_object_its_module_defines(package: ModuleType) -> None:
    for name in package.__all__:
        found = getattr(package, name)
        assert not isinstance(found, ModuleType), name  # a submodule of the same name
        home = getattr(found, "__module__", None)  # a constant has none
        if home is not None:
            assert getattr(importlib.import_module(home), name) is found, name


@pytest.mark.parametrize("package", PACKAGES, ids=lambda package: package.__name__)
def test_a_name_it_does_not_export_is_an_attribute_error(package: ModuleType) -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = package.no_such_name


def test_a_function_named_as_its_module_stays_the_function() -> None:
    import flotilla.sdk.checkpoint  # the module's import must not replace the name

    assert callable(flotilla.sdk.checkpoint)
    assert callable(flotilla.checkpoint)


def test_a_submodule_is_still_imported_by_name() -> None:
    from flotilla.lifecycle import gangs, machine

    assert machine.__name__ == "flotilla.lifecycle.machine"
    assert gangs.__name__ == "flotilla.lifecycle.gangs"
