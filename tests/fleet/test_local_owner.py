"""A local cluster's owner label: which host and state dir drive it, without the state dir's
path (every token can read a cluster's labels; issue 23)."""

from __future__ import annotations

import socket
from pathlib import Path

from flotilla.model import ClusterSpec
from flotilla.service.fleet import OWNER_LABEL, check_local_owner, local_owner
from flotilla.store import SqlStore


def _record_owner(store: SqlStore, owner: str) -> None:
    store.upsert_cluster(
        ClusterSpec.model_validate(
            {
                "name": "local",
                "backend": "local",
                "labels": {OWNER_LABEL: owner},
                "nodes": [{"name": "vm", "resources": {"cpu": 2}}],
            }
        )
    )


def test_the_owner_label_names_the_host_but_not_the_state_dirs_path(tmp_path: Path) -> None:
    state_dir = tmp_path / "secret-place" / "local"
    owner = local_owner(state_dir)
    assert owner.startswith(f"{socket.gethostname()}:")
    assert "secret-place" not in owner and str(tmp_path) not in owner
    assert owner == local_owner(state_dir)
    assert owner != local_owner(tmp_path / "elsewhere")


def test_a_label_recorded_with_the_path_still_matches_its_state_dir(tmp_path: Path) -> None:
    """A database written before: its label held ``HOST:/PATH``; the same state dir still
    drives the cluster, another is still refused, and the refusal shows no path."""
    state_dir = (tmp_path / "state").resolve()
    store = SqlStore.open(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        _record_owner(store, f"{socket.gethostname()}:{state_dir}")
        assert check_local_owner(store, "local", local_owner(state_dir)) is None
        refused = check_local_owner(store, "local", local_owner(tmp_path / "other"))
        assert refused is not None
        assert str(tmp_path) not in refused and "host:digest of its state dir" in refused
    finally:
        store.close()
