"""Imports point downward in the layer order of ``docs/architecture.md`` where the issue
asked for it: the backends (which report nodes) and the engine (which places on them) share
``NodeInfo`` through the model layer, so no backend imports the engine; the lifecycle core is
pure (the model and itself only); the store's job writes and its cycle writes import in one
direction; the composition root (``flotilla.app``) is imported by the CLI alone and imports no
CLI."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import flotilla

ROOT = Path(flotilla.__path__[0])


def _imported(source: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _package(name: str) -> list[Path]:
    return sorted((ROOT / name).rglob("*.py"))


def _under(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == f"flotilla.{p}" or name.startswith(f"flotilla.{p}.") for p in packages)


@pytest.mark.parametrize("source", _package("backends"), ids=lambda path: path.name)
def test_no_backend_imports_the_engine(source: Path) -> None:
    leaks = [n for n in _imported(source) if _under(n, ("framework", "scheduler"))]
    assert leaks == []


@pytest.mark.parametrize("source", _package("lifecycle"), ids=lambda path: path.name)
def test_the_lifecycle_core_imports_only_the_model_and_itself(source: Path) -> None:
    flotilla_imports = [n for n in _imported(source) if n.startswith("flotilla")]
    assert all(_under(name, ("model", "lifecycle")) for name in flotilla_imports)


def test_the_store_jobs_module_does_not_import_the_cycle_module() -> None:
    """``store/cycle.py`` builds on ``store/jobs.py``; the reverse import (inside a function,
    to dodge the circle) is gone."""
    assert "flotilla.store.cycle" not in _imported(ROOT / "store" / "jobs.py")


def _all_but(*names: str) -> list[Path]:
    return sorted(
        source for source in ROOT.rglob("*.py") if source.relative_to(ROOT).parts[0] not in names
    )


@pytest.mark.parametrize(
    "source", _all_but("app", "cli"), ids=lambda path: str(path.relative_to(ROOT))
)
def test_only_the_cli_imports_the_composition_root(source: Path) -> None:
    """``flotilla.app`` builds the service from every layer below it; a module below that
    imported it would close a circle (the service must not know how it is put together)."""
    assert [n for n in _imported(source) if _under(n, ("app",))] == []


@pytest.mark.parametrize("source", _package("app"), ids=lambda path: path.name)
def test_the_composition_root_does_not_import_the_cli(source: Path) -> None:
    assert [n for n in _imported(source) if _under(n, ("cli",))] == []
