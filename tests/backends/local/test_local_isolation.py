"""What a job of the ``local`` backend can see of the server: its environment, its folder,
its identity (issue 12, defect 6), its supervisor, other runs' files (issue 23). A
submitter is not the server's operator."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.backends import BackendRunState, DispatchRejected
from flotilla.backends.local.backend import LocalBackend
from tests.backends.support import LocalHarness, read_all, request
from tests.timing import wait_until


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


# --- issue 23: nothing of a job reaches the server's side --------------------------------


def needs_root() -> None:
    """Switching users needs root: skip without it, except in CI, which must test it."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("this test must run as root in CI (it switches users)")
        pytest.skip("switching users needs root")


def ancestors(pid: int, up_to: int) -> list[int]:
    """The processes from ``pid``'s parent up to and including ``up_to``."""
    chain = []
    while pid != up_to:
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        chain.append(pid)
    return chain


def wait_until_exec(pid: int, program: bytes) -> None:
    """Wait until ``pid`` runs ``program`` (its supervisor forked it; it execs soon)."""
    wait_until(
        lambda: Path(f"/proc/{pid}/cmdline").read_bytes().startswith(program),
        f"{pid} to run {program!r}",
    )


def test_the_supervisor_takes_neither_the_jobs_environment_arguments_nor_working_dir(
    local: LocalHarness,
) -> None:
    """The supervisor runs as the server (root, when it is): the job's variables would be its
    own (``LD_PRELOAD``), its arguments readable by every user in ``/proc/PID/cmdline``, and
    its working dir entered with the server's rights. The command still gets all three."""
    backend = local.make(working_dir=None)
    payload = {
        "command": ["sh", "-c", "sleep 60; : an-argument-of-the-job"],
        "env": {"JOB_SECRET": "s3cret-of-the-job"},
        "working_dir": "sub",
    }
    backend.dispatch(request(backend, "run-1", payload))
    status = local.wait(backend, "run-1", lambda s: s.replicas[0].process_id is not None, "started")
    command = status.replicas[0].process_id
    assert command is not None
    wait_until_exec(command, b"sh\0")

    privileged_ones = ancestors(command, up_to=os.getpid())[:-1]  # below this test's process
    assert privileged_ones
    for privileged in privileged_ones:
        proc = Path(f"/proc/{privileged}")  # the supervisor, and its PID 1 of the namespace
        assert b"s3cret-of-the-job" not in (proc / "environ").read_bytes()
        assert b"JOB_SECRET" not in (proc / "environ").read_bytes()
        assert b"an-argument-of-the-job" not in (proc / "cmdline").read_bytes()
        assert os.readlink(proc / "cwd") == "/"
    mine = Path(f"/proc/{command}")
    assert b"JOB_SECRET=s3cret-of-the-job" in (mine / "environ").read_bytes().split(b"\0")
    assert b"an-argument-of-the-job" in (mine / "cmdline").read_bytes()
    assert Path(os.readlink(mine / "cwd")).name == "sub"


PRELOAD = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/uid-%d-euid-%d-pid-%d",
             MARKS, (int)getuid(), (int)geteuid(), (int)getpid());
    FILE *file = fopen(path, "w");
    if (file) fclose(file);
}
"""


@pytest.fixture
def preload_library() -> Iterator[tuple[Path, Path]]:
    """A shared library whose constructor leaves a file naming the uid it ran as, built with
    ``cc``; both in a place every user can reach (the test's own tmp dir is root's only)."""
    if shutil.which("cc") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("cc is needed to build the preload library")
        pytest.skip("no C compiler")
    # Not in /tmp: a job running as another user has a /tmp of its own (issue 35).
    place = Path(tempfile.mkdtemp(prefix="flotilla-preload-", dir="/var/tmp"))
    try:
        os.chmod(place, 0o755)
        marks = place / "marks"
        marks.mkdir()
        os.chmod(marks, 0o1777)
        source, library = place / "mark.c", place / "libmark.so"
        source.write_text(PRELOAD)
        subprocess.run(
            ["cc", "-shared", "-fPIC", f'-DMARKS="{marks}"', "-o", str(library), str(source)],
            check=True,
        )
        os.chmod(library, 0o755)
        yield library, marks
    finally:
        shutil.rmtree(place, ignore_errors=True)


def test_a_preload_library_from_a_jobs_environment_never_runs_as_root(
    local: LocalHarness, preload_library: tuple[Path, Path]
) -> None:
    """Issue 23's way to root: one job writes a library, the next sets ``LD_PRELOAD`` to it,
    and its constructor ran in the root supervisor. It may run in the job itself (its own,
    unprivileged identity), never in a process of the server's."""
    needs_root()
    library, marks = preload_library
    nobody = pwd.getpwnam("nobody")
    backend = local.make(working_dir=None, run_as="nobody")
    payload = {
        "command": ["true"],
        "env": {"LD_PRELOAD": str(library), "LD_LIBRARY_PATH": str(library.parent)},
    }
    backend.dispatch(request(backend, "run-1", payload, replicas=2))
    assert local.wait_terminal(backend, "run-1").state is BackendRunState.SUCCEEDED
    seen = sorted(path.name for path in marks.iterdir())
    assert [name for name in seen if "uid-0-" in name or "euid-0-" in name] == []
    assert any(name.startswith(f"uid-{nobody.pw_uid}-") for name in seen), (
        f"the library never ran in the job itself, so the test proves nothing: {seen}"
    )


# --- issue 23: working_dir stays inside the run's scratch dir -----------------------------


@pytest.mark.parametrize(
    ("working_dir", "problem"),
    [
        ("../../etc", r"working_dir: '\.\./\.\./etc' leaves the run's scratch dir"),
        ("a/../../b", r"working_dir: 'a/\.\./\.\./b' leaves the run's scratch dir"),
        ("/", r"working_dir: '/' is an absolute path.*allowed_working_dirs \(none\)"),
        ("/srv/data/../../etc", r"working_dir: '/srv/data/\.\./\.\./etc' is an absolute path"),
        # Under an allowed dir means inside it, not sharing its name's first letters.
        ("/srv/database", r"working_dir: '/srv/database' is an absolute path"),
    ],
)
def test_a_working_dir_outside_the_scratch_dir_is_refused_naming_the_field(
    local: LocalHarness, working_dir: str, problem: str
) -> None:
    backend = local.make(
        working_dir=None, allowed_working_dirs=[] if working_dir == "/" else ["/srv/data"]
    )
    with pytest.raises(DispatchRejected, match=problem):
        backend.dispatch(
            request(backend, "run-1", {"command": ["pwd"], "working_dir": working_dir})
        )
    # Its directory may remain (the run's lock across processes lives there), its record not.
    record = local.state_dir / "runs" / "run-1" / "run.json"
    assert not record.exists(), "a refused run left a record"


def test_a_relative_working_dir_is_made_inside_the_runs_scratch_dir(local: LocalHarness) -> None:
    backend = local.make(working_dir=None)
    backend.dispatch(request(backend, "run-1", {"command": ["pwd"], "working_dir": "a/b"}))
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.SUCCEEDED, status.message
    where = Path(read_all(backend, "run-1").strip())
    assert where.parts[-2:] == ("a", "b")
    assert where.parent.parent.name.startswith("flotilla-local-run-1-")


def test_the_state_dir_runs_and_logs_are_the_servers_alone(local: LocalHarness) -> None:
    """A job cannot list or read other runs' logs: every directory of the state is 0700 and
    every file 0600 (``runs/`` was 0755)."""
    backend = local.make()
    backend.dispatch(request(backend, "run-1", local.quick()))
    local.wait_terminal(backend, "run-1")
    for path in [local.state_dir, *local.state_dir.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path} is {mode:o}"


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
