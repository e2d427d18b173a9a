"""Package exports imported on first use (PEP 562), so that importing one light module of a
package (``flotilla.lifecycle.states``, ``flotilla.model.quantity``) does not import the whole
package: the CLI's client commands start without the engine's and the specs' pydantic models
(docs/performance.md, CLI start-up).

A package lists the module each exported name lives in and binds ``__getattr__ = exports(...)``; its
``if TYPE_CHECKING:`` imports say the same to type checkers. ``tests/test_lazy_exports.py``
checks that every name of a package's ``__all__`` resolves.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def exports(package: str, modules: Mapping[str, Iterable[str]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``modules`` names, for each module, the
    exported names it defines."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
