"""What one run of the ``local`` backend may cost everyone else (issue 23): its logs are
capped, and starting its replicas costs time linear in their number."""

from __future__ import annotations

from pathlib import Path

import pytest

from flotilla.backends import BackendRunState, LogsRequest, LogStream
from flotilla.backends.local import records as records
from flotilla.backends.local.backend import LocalBackend
from tests.backends.support import LocalHarness, read_replica, request


def test_a_runs_logs_are_capped_and_the_cap_is_stated_in_them(local: LocalHarness) -> None:
    """Issue 23: any submitter filled the disk (2 GiB of log in 56 s). All replicas and both
    streams share the run's ``log_limit``; the command goes on (its output is dropped), and
    the log says why it stops short."""
    backend = local.make(log_limit="64Ki")
    flood = "head -c 1000000 /dev/zero | tr '\\0' x; echo; echo err-line >&2; echo done"
    backend.dispatch(request(backend, "run-1", {"command": flood}, replicas=2))
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.SUCCEEDED, status.message

    directory = local.state_dir / "runs" / "run-1"
    written = sum(path.stat().st_size for path in directory.glob("main-*.std*"))
    note = "[log capped at 64 KiB for this run (the cluster's log_limit): the rest of its output"
    assert written <= 64 * 1024 + 4 * (len(note) + 60)
    for replica in (0, 1):
        stdout = read_replica(backend, "run-1", "main", replica)
        assert "done" not in stdout
    assert any(
        read_replica(backend, "run-1", "main", replica)
        .rstrip("\n")
        .splitlines()[-1]
        .startswith(note)
        for replica in (0, 1)
    )


def test_logs_under_the_cap_are_whole(local: LocalHarness) -> None:
    backend = local.make(log_limit="1Mi")
    command = "for i in 1 2 3; do echo out-$i; echo err-$i >&2; done"
    backend.dispatch(request(backend, "run-1", {"command": command}))
    local.wait_terminal(backend, "run-1")
    assert read_replica(backend, "run-1", "main") == "out-1\nout-2\nout-3\n"
    stderr = backend.logs(LogsRequest("run-1", stream=LogStream.STDERR)).text
    assert stderr == "err-1\nerr-2\nerr-3\n"


@pytest.mark.parametrize(
    ("value", "problem"),
    [("lots", "is not a quantity"), (0, "must be at least 1 byte"), (-5, "must be >= 0")],
)
def test_a_bad_log_limit_is_refused_naming_the_setting(
    tmp_path: Path, value: object, problem: str
) -> None:
    with pytest.raises(ValueError, match=rf"log_limit: .*{problem}"):
        LocalBackend(state_dir=tmp_path, log_limit=value)  # type: ignore[arg-type]


def test_dispatch_writes_the_runs_record_a_fixed_number_of_times_whatever_its_replicas(
    local: LocalHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23: ``replicas: 10000`` rewrote ``run.json`` (every replica in it) once per
    replica start — quadratic, minutes of dispatch during which nothing else ran. Now the
    record is written before the first start, once with every pid, once running: the same
    for 1 replica as for 40 (the time itself is in docs/performance.md, bench.local_replicas).
    """
    writes: list[int] = []
    original = records.write_json_atomic

    def counted(path: Path, data: dict[str, object], *, durable: bool = True) -> None:
        replicas = data.get("replicas")
        writes.append(len(replicas) if isinstance(replicas, list) else 0)
        original(path, data, durable=durable)

    monkeypatch.setattr(records, "write_json_atomic", counted)
    backend = local.make()
    counts = {}
    for replicas in (1, 40):
        writes.clear()
        run_id = f"run-{replicas}"
        backend.dispatch(request(backend, run_id, {"command": ["true"]}, replicas=replicas))
        counts[replicas] = len(writes)
        assert local.wait_terminal(backend, run_id).state is BackendRunState.SUCCEEDED
    assert counts[40] == counts[1] <= 3
