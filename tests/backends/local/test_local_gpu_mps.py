"""``gpu_sharing: mps`` on the local backend, with a fake ``nvidia-cuda-mps-control`` on PATH
that behaves as NVIDIA's does where it matters here: ``-d`` starts a daemon (a process of its
own), a control command answers only while that daemon runs (else it fails, "Cannot find MPS
control daemon process"), and ``quit`` ends it; it records how it was called. A fractional job
runs with its daemon started for its account and share and the limits set on the daemon; a
run whose daemon cannot be reached fails, unstarted, saying its limits were not applied."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.backends import BackendRunState, DispatchRequest, ReplicaPlacement
from flotilla.backends.interface import Backend
from flotilla.backends.local.gpu_inventory import GPU_ENV
from flotilla.backends.local.gpu_mps import mps_base
from tests.backends.fake_nvml import H200_UUID, install
from tests.backends.local.test_local_identities import uids_in_range
from tests.backends.local.test_local_isolation import needs_root
from tests.backends.support import LocalHarness, node_of, read_all
from tests.timing import wait_until

GIB = 2**30
FAKE_CONTROL = """#!/bin/sh
# nvidia-cuda-mps-control, faked: records each call; -d starts a "daemon" (a sleep) whose pid
# is kept in the pipe directory; a command answers only while it runs.
pidfile="$CUDA_MPS_PIPE_DIRECTORY/fake-daemon.pid"
{
  echo "args: $*"
  echo "pipe: $CUDA_MPS_PIPE_DIRECTORY"
  echo "log: $CUDA_MPS_LOG_DIRECTORY"
  echo "devices: $CUDA_VISIBLE_DEVICES"
  echo "uid: $(id -u)"
} >> "$MPS_RECORD"
if [ "$1" = "-d" ]; then
  [ -n "$MPS_FAKE_NO_DAEMON" ] && exit 0
  sleep 600 >/dev/null 2>&1 &
  echo $! > "$pidfile"
  echo "daemon: $!" >> "$MPS_RECORD"
  exit 0
fi
input="$(cat)"
echo "input: $input" | tr '\\n' ';' >> "$MPS_RECORD"
echo >> "$MPS_RECORD"
if ! [ -f "$pidfile" ] || ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "Cannot find MPS control daemon process" >&2
  exit 1
fi
case "$input" in
  *set_default*) [ -n "$MPS_FAKE_REFUSE_LIMITS" ] && { echo "refused" >&2; exit 1; } ;;
esac
case "$input" in
  *quit*) kill "$(cat "$pidfile")"; rm -f "$pidfile" ;;
esac
exit 0
"""
SHOW = (
    'echo "$CUDA_MPS_PIPE_DIRECTORY|$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'
    '|$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"'
)


@pytest.fixture
def control(local: LocalHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fake control command first on PATH, on the fake NVML's H200; returns the file it
    records into (both under /var/tmp, where a run's own uid reaches them). Ends the daemons
    it started and removes the daemons' directories."""
    shared = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="flotilla-test-mps-"))
    shared.chmod(0o755)
    bin_dir = shared / "bin"
    bin_dir.mkdir(mode=0o755)
    script = bin_dir / "nvidia-cuda-mps-control"
    script.write_text(FAKE_CONTROL)
    script.chmod(0o755)
    record = shared / "mps-record"
    record.touch()
    record.chmod(0o666)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MPS_RECORD", str(record))
    monkeypatch.delenv(GPU_ENV, raising=False)
    install(monkeypatch, "h200-1")
    yield record
    local.close_all()
    for line in record.read_text().splitlines() if record.exists() else ():
        if line.startswith("daemon: "):
            with contextlib.suppress(OSError):
                os.kill(int(line.split()[1]), signal.SIGKILL)
    shutil.rmtree(mps_base(local.state_dir), ignore_errors=True)
    shutil.rmtree(shared, ignore_errors=True)


def gpu_job(
    backend: Backend, run_id: str, resources: dict[str, float], command: str = SHOW
) -> DispatchRequest:
    return DispatchRequest(
        run_id=run_id,
        job="job-a",
        cluster=backend.cluster,
        placements=(ReplicaPlacement("main", 0, node_of(backend), gpu_ids=(0,)),),
        # The job tries to raise its own limits: the backend's values win.
        payload={
            "command": ["sh", "-c", command],
            "env": {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"},
        },
        resources={"main": resources},
    )


def test_jobs_run_as_clients_of_a_daemon_of_their_share_with_its_limits_set_on_the_daemon(
    local: LocalHarness, control: Path
) -> None:
    backend = local.make(gpu_sharing="mps")
    assert "args: -d" not in control.read_text()  # none yet
    base = mps_base(local.state_dir)
    account = base / str(os.getuid())

    share = {"cpu": 0.1, "gpu": 0.25, "gpu_memory": 35 * GIB}
    backend.dispatch(gpu_job(backend, "quarter", share))
    assert local.wait_terminal(backend, "quarter").state is BackendRunState.SUCCEEDED
    pipe = account / "0-35840M-25" / "pipe"
    assert read_all(backend, "quarter") == f"{pipe}|0=35840M|25\n"
    started = control.read_text()
    assert "args: -d" in started
    assert f"pipe: {pipe}" in started
    assert f"devices: {H200_UUID}" in started  # the daemon's device, by UUID
    assert (
        "input: set_default_device_pinned_mem_limit 0 35840M;"
        "set_default_active_thread_percentage 25;"
    ) in started
    # Anyone may pass the base, nobody list it; the account's directory is its alone.
    assert stat.S_IMODE(base.stat().st_mode) == 0o711
    assert stat.S_IMODE(account.stat().st_mode) == 0o700
    assert account.stat().st_uid == os.getuid()

    # No gpu_memory: the fraction of the device's 143771 MiB; a daemon of its own share.
    backend.dispatch(gpu_job(backend, "half", {"cpu": 0.1, "gpu": 0.5}))
    local.wait_terminal(backend, "half")
    half = account / f"0-{143771 // 2}M-50" / "pipe"
    assert read_all(backend, "half") == f"{half}|0={143771 // 2}M|50\n"

    backend.dispatch(gpu_job(backend, "whole", {"cpu": 0.1, "gpu": 1}))
    local.wait_terminal(backend, "whole")
    assert read_all(backend, "whole") == "||100\n"  # its device alone: no MPS, no limit


def test_a_daemon_is_told_to_quit_once_its_runs_ended(local: LocalHarness, control: Path) -> None:
    backend = local.make(gpu_sharing="mps")
    backend.dispatch(gpu_job(backend, "quarter", {"cpu": 0.1, "gpu": 0.25}))
    local.wait_terminal(backend, "quarter")
    wait_until(lambda: "input: quit" in control.read_text(), "the daemon told to quit")


def test_a_leftover_control_file_is_not_taken_for_a_daemon(
    local: LocalHarness, control: Path
) -> None:
    """After a reboot the pipe directory may still hold ``control``: the daemon is asked, does
    not answer, and one is started."""
    pipe = mps_base(local.state_dir) / str(os.getuid()) / "0-35840M-25" / "pipe"
    pipe.mkdir(parents=True)
    (pipe / "control").touch()
    backend = local.make(gpu_sharing="mps")
    backend.dispatch(gpu_job(backend, "quarter", {"cpu": 0.1, "gpu": 0.25, "gpu_memory": 35 * GIB}))
    assert local.wait_terminal(backend, "quarter").state is BackendRunState.SUCCEEDED
    assert "args: -d" in control.read_text()


@pytest.mark.parametrize(
    ("broken", "why"),
    [
        ("MPS_FAKE_NO_DAEMON", "the MPS control daemon in .* does not answer"),
        ("MPS_FAKE_REFUSE_LIMITS", "the MPS control daemon refused the limits: refused"),
    ],
)
def test_an_mps_run_that_cannot_reach_its_daemon_is_refused_not_run_unlimited(
    local: LocalHarness,
    control: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    broken: str,
    why: str,
) -> None:
    monkeypatch.setenv(broken, "1")
    backend = local.make(gpu_sharing="mps")
    ran = tmp_path / "ran"
    request = gpu_job(backend, "quarter", {"cpu": 0.1, "gpu": 0.25}, command=f"touch {ran}")
    backend.dispatch(request)
    status = local.wait_terminal(backend, "quarter")
    assert status.state is BackendRunState.FAILED
    assert "MPS limits not applied: " in status.message, status.message
    assert re.search(why, status.message), status.message
    assert not ran.exists(), "the job ran without its MPS limits"


def test_mps_without_the_control_command_is_refused_naming_the_setting(
    local: LocalHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(GPU_ENV, raising=False)
    install(monkeypatch, "h200-1")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ValueError, match=r"gpu_sharing: .*nvidia-cuda-mps-control is not on PATH"):
        local.make(gpu_sharing="mps")


def test_a_runs_daemon_is_its_own_uids_and_reachable_by_it_alone(
    local: LocalHarness, control: Path
) -> None:
    """As root with a uid per run: the daemon runs as the run's uid, in a directory that uid
    owns (0700, under a 0711 base), and the job, as that uid, reaches its pipe."""
    needs_root()
    uid_range = uids_in_range(56000, 2)
    backend = local.make(gpu_sharing="mps", working_dir=None, uid_range=uid_range)
    command = (
        '[ -w "$CUDA_MPS_PIPE_DIRECTORY" ] && [ -e "$CUDA_MPS_PIPE_DIRECTORY/fake-daemon.pid" ]'
        " && echo reachable; id -u"
    )
    backend.dispatch(gpu_job(backend, "quarter", {"cpu": 0.1, "gpu": 0.25}, command=command))
    assert local.wait_terminal(backend, "quarter").state is BackendRunState.SUCCEEDED
    reachable, uid = read_all(backend, "quarter").split()
    assert reachable == "reachable"
    assert int(uid) in range(int(uid_range.split("-")[0]), int(uid_range.split("-")[1]) + 1)
    started = control.read_text().split("args: -d")[1]
    assert f"uid: {uid}" in started.splitlines()[4]
    account = mps_base(local.state_dir) / uid
    assert account.stat().st_uid == int(uid)
    assert stat.S_IMODE(account.stat().st_mode) == 0o700
