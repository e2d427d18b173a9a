"""Where each command lives, and the root group that imports a command's module only when
the command line names it (click's lazily loaded subcommands).

``flotilla jobs`` then imports and builds the commands of ``cli/jobs.py`` alone, not those of
the other dozen modules; ``flotilla --help``, which lists every command with its summary, still
imports them all (docs/performance.md, CLI start-up). ``COMMANDS`` must name every command a
module's ``register`` adds, in the order of the help's list:
``tests/cli/test_lazy_commands.py`` compares it with every module registered at once.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

import typer
import typer.main
from typer.core import TyperGroup

from flotilla.cli import coercion

if TYPE_CHECKING:
    from typer._click import Command, Context  # typer's own click: what its groups hold

COMMANDS: dict[str, str] = {
    "submit": "jobs",
    "jobs": "jobs",
    "watch": "jobs",
    "wait": "jobs",
    "cancel": "jobs",
    "reprioritize": "jobs",
    "hold": "holds",
    "release": "holds",
    "requeue": "holds",
    "describe": "describe",
    "why": "describe",
    "logs": "logs",
    "queues": "catalog",
    "quotas": "catalog",
    "clusters": "catalog",
    "replay": "replay",
    "serve": "serve",
    "up": "up",
    "ui": "ui",
    "usage": "usage",
    "runs": "runs",
    "sacct": "runs",
    "run": "run",
    "queue": "catalog",
    "quota": "catalog",
    "fleet": "fleet",
}
"""Each command (or command group) and its module under ``flotilla.cli``, in help order."""

SETTINGS: dict[str, Any] = {"pretty_exceptions_enable": False, "rich_markup_mode": None}
"""The root app's settings, which the commands built here are built with too."""

coercion.install()  # values converted without pydantic where typer's result is plain


def build(module: str) -> dict[str, Command]:
    """The commands ``flotilla.cli.MODULE`` registers, built as the root app would."""
    app = typer.Typer(**SETTINGS)
    importlib.import_module(f"flotilla.cli.{module}").register(app)
    return dict(typer.main.get_group(app).commands)


class LazyCommands(MutableMapping[str, "Command"]):
    """The root group's commands: those built already (``simulate``), then those of
    ``COMMANDS``, each module imported and built on first lookup. Names, membership and
    order are known without importing anything."""

    def __init__(self, built: MutableMapping[str, Command]) -> None:
        self.built = built
        self.lazy = dict(COMMANDS)

    def __getitem__(self, name: str) -> Command:
        if name not in self.built and name in self.lazy:
            for found, command in build(self.lazy[name]).items():
                self.built.setdefault(found, command)
        return self.built[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self.built[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self.built.pop(name, None)
        self.lazy.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self.built or name in self.lazy

    def __iter__(self) -> Iterator[str]:
        yield from (name for name in self.built if name not in self.lazy)
        yield from self.lazy

    def __len__(self) -> int:
        return sum(1 for _ in self)


class RootGroup(TyperGroup):
    """``flotilla``'s group: the commands of ``COMMANDS`` come from ``LazyCommands``."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(self.commands)

    def list_commands(self, ctx: Context) -> list[str]:
        """The names alone: listing them imports no command's module."""
        return list(self.commands)
