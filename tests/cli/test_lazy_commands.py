"""The root group imports a command's module when the command line names it
(``flotilla.cli.commands``): its table must name every command each module registers, or a
new command would be missing from ``flotilla --help`` and unreachable."""

from __future__ import annotations

import ast
from pathlib import Path

import typer.main

import flotilla.cli
from flotilla.cli.commands import COMMANDS, build
from flotilla.cli.main import app

CLI = Path(flotilla.cli.__path__[0])


def test_the_table_names_every_command_of_every_module_and_no_other() -> None:
    for module in set(COMMANDS.values()):
        listed = [name for name, home in COMMANDS.items() if home == module]
        assert sorted(build(module)) == sorted(listed), module


def test_every_module_that_registers_commands_is_in_the_table() -> None:
    registering = {
        path.stem
        for path in CLI.glob("*.py")
        if any(
            isinstance(node, ast.FunctionDef) and node.name == "register"
            for node in ast.parse(path.read_text()).body
        )
    }
    assert registering == set(COMMANDS.values())


def test_the_root_lists_simulate_then_the_table_in_order() -> None:
    root = typer.main.get_command(app)
    assert list(root.commands) == ["simulate", *COMMANDS]
