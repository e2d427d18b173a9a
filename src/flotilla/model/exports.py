"""A package's exported names imported from their modules on first use (PEP 562).

Why: ``flotilla.model``, ``flotilla.lifecycle`` and ``flotilla.sdk`` export many names whose
modules pull in pydantic and more; a client command that needs one of them must not pay for
all (docs/performance.md, CLI start-up). Each package lists where its names are defined and
takes its module ``__getattr__`` from here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(package: str, modules: Mapping[str, Sequence[str]]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: each name of ``modules`` (module -> names) imported
    from its module when first asked for; any other name an ``AttributeError``."""
    where = {name: module for module, names in modules.items() for name in names}

    def exported(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return exported
