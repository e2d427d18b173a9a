"""What a job of the ``local`` backend can see of the server: its environment, its folder,
its identity (issue 12, defect 6). A submitter is not the server's operator."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from flotilla.backends import BackendRunState
from flotilla.backends.local import LocalBackend

from .support import LocalHarness, read_all, request


def test_a_job_sees_only_its_own_variables_and_flotillas_never_the_servers(
    local: LocalHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOTILLA_TOKEN", "admin-token-of-the-server")
    monkeypatch.setenv("DATABASE_PASSWORD", "hunter2")
    backend = local.make()
    payload = {"command": ["env"], "env": {"MINE": "declared"}}
    backend.dispatch(request(backend, "run-1", payload, env={"FLOTILLA_QUEUE": "q"}))
    assert local.wait_terminal(backend, "run-1").state is BackendRunState.SUCCEEDED
    seen = dict(
        line.split("=", 1) for line in read_all(backend, "run-1").splitlines() if "=" in line
    )
    assert "admin-token-of-the-server" not in seen.values()
    assert "DATABASE_PASSWORD" not in seen
    assert seen["MINE"] == "declared" and seen["FLOTILLA_QUEUE"] == "q"
    assert seen["FLOTILLA_RUN"] == "run-1"
    assert "PATH" in seen and seen["USER"] == pwd.getpwuid(os.getuid()).pw_name
    allowed = {"PATH", "LANG", "LC_ALL", "TZ", "HOME", "USER", "LOGNAME", "PWD", "SHLVL", "_"}
    allowed |= {"MINE", "CUDA_VISIBLE_DEVICES"}
    allowed |= {
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
    assert {name for name in seen if not name.startswith("FLOTILLA_")} <= allowed


def test_without_a_working_dir_each_run_gets_a_scratch_dir_removed_when_it_ends(
    local: LocalHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(local.scratch)  # the server's folder
    backend = local.make(working_dir=None)
    backend.dispatch(request(backend, "run-1", {"command": "pwd; touch made-here"}))
    assert local.wait_terminal(backend, "run-1").state is BackendRunState.SUCCEEDED
    where = Path(read_all(backend, "run-1").strip())
    assert where != local.scratch.resolve() and local.state_dir not in where.parents
    assert not (local.scratch / "made-here").exists()
    assert not where.exists(), "the run's scratch dir was left behind"
    assert os.stat(local.state_dir).st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="switching user needs root")
def test_run_as_runs_the_command_as_that_user_who_cannot_touch_the_state(
    local: LocalHarness,
) -> None:
    nobody = pwd.getpwnam("nobody")
    backend = local.make(working_dir=None, run_as="nobody")
    state = local.state_dir
    command = f"id -u; touch {state}/forged && echo wrote-state; ls {state} || echo denied"
    backend.dispatch(request(backend, "run-1", {"command": command}))
    assert local.wait_terminal(backend, "run-1").state is BackendRunState.SUCCEEDED
    lines = read_all(backend, "run-1").split()
    assert lines[0] == str(nobody.pw_uid)
    assert "wrote-state" not in lines and "denied" in lines
    assert not (state / "forged").exists()


def test_run_as_a_user_that_does_not_exist_is_refused_naming_the_setting(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match=r"run_as: no such user 'no-such-user-x'"):
        LocalBackend(state_dir=tmp_path, run_as="no-such-user-x")


@pytest.mark.skipif(os.geteuid() != 0, reason="switching user needs root")
def test_a_job_run_as_nobody_gets_a_home_it_can_write_and_the_standard_path(
    local: LocalHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root server's jobs ran with ``HOME=/nonexistent`` (nobody's) and root's PATH."""
    monkeypatch.setenv("PATH", f"/root/.local/bin:/usr/local/sbin:{os.environ['PATH']}")
    backend = local.make(working_dir=None, run_as="nobody")
    command = 'echo "$HOME"; echo "$PATH"; pwd; touch "$HOME/.cache-test" && echo wrote-home'
    backend.dispatch(request(backend, "run-1", {"command": command}))
    assert local.wait_terminal(backend, "run-1").state is BackendRunState.SUCCEEDED
    home, path, working_dir, wrote = read_all(backend, "run-1").split()
    assert home == working_dir != "/nonexistent" and wrote == "wrote-home"
    assert path == "/usr/local/bin:/usr/bin:/bin"


def test_a_job_run_as_the_servers_user_keeps_its_home_and_path(
    local: LocalHarness,
) -> None:
    backend = local.make(working_dir=None)
    backend.dispatch(request(backend, "run-1", {"command": 'echo "$HOME"; echo "$PATH"'}))
    assert local.wait_terminal(backend, "run-1").state is BackendRunState.SUCCEEDED
    home, path = read_all(backend, "run-1").split()
    assert home == pwd.getpwuid(os.getuid()).pw_dir and path == os.environ["PATH"]
