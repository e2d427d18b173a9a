"""``flotilla up`` says in one line, at start, what of a job's requests this machine does not
enforce for its local cluster (no cgroups, no PID namespaces), and runs anyway."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from flotilla.backends.local import tree as local_tree
from flotilla.backends.local.cgroups import Detected
from flotilla.cli.main import app


def up(tmp_path: Path) -> Result:
    arguments = ["up", "--port", "0", "--db", f"sqlite:///{tmp_path}/flotilla.db"]
    return CliRunner().invoke(app, [*arguments, "--state-dir", str(tmp_path / "state")])


def test_without_cgroups_up_says_what_is_not_enforced_in_one_line_and_runs(
    served: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        local_tree, "_detected", lambda: Detected(None, "the server does not run as root")
    )
    monkeypatch.setattr(local_tree, "pid_namespaces_work", lambda: False)
    result = up(tmp_path)
    assert result.exit_code == 0, result.output
    assert served, "up did not go on to serve"
    [line] = [line for line in result.output.splitlines() if "not enforced" in line]
    assert "memory" in line and "process count" in line and "CPU share" in line
    assert "setsid" in line and "the server does not run as root" in line
    if os.geteuid() == 0:  # issue 35: a uid per run needs cgroups; one account instead
        assert (
            "local jobs run as nobody, all of them (a uid per owner needs cgroups: "
            "the server does not run as root)" in result.output
        )


def test_without_cgroups_an_asked_uid_range_is_refused_naming_the_option(
    served: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0:
        pytest.skip("a uid range needs root")
    monkeypatch.setattr(local_tree, "_detected", lambda: Detected(None, "no controllers"))
    result = CliRunner().invoke(
        app,
        [
            "up",
            "--port",
            "0",
            "--db",
            f"sqlite:///{tmp_path}/flotilla.db",
            "--uid-range",
            "60000-60009",
        ],
    )
    assert result.exit_code == 2, result.output
    assert result.output.startswith(
        "error: --uid-range: a uid per owner needs cgroups, and this machine gives none "
        "(no controllers)"
    )
    assert not served


@pytest.mark.skipif(
    os.geteuid() != 0 and os.environ.get("CI") != "true", reason="isolating jobs needs root"
)
def test_as_root_on_a_machine_with_cgroups_up_has_nothing_to_confess(
    served: list[dict[str, Any]], tmp_path: Path
) -> None:
    result = up(tmp_path)
    assert result.exit_code == 0, result.output
    assert "not enforced" not in result.output
