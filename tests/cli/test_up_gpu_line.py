"""`flotilla up` says in one line at start which GPUs its local cluster has, and how."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from bench.split import scheduler_up

from tests.timing import limit


def test_up_says_which_gpus_the_local_cluster_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOTILLA_LOCAL_GPUS", "3")  # a subprocess inherits it
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "up.log"
    db = f"sqlite:///{tmp_path / 'flotilla.db'}"
    with scheduler_up(
        log,
        "--no-api",
        "--db",
        db,
        "--port",
        str(port),
        "--state-dir",
        str(tmp_path / "runs"),
        patience=limit(120),
    ):
        lines = log.read_text().splitlines()
    assert "  cluster local: GPUs: 3 from FLOTILLA_LOCAL_GPUS (no discovery)" in lines
