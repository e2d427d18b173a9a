"""Engines that do not answer, for the engines-apart benchmark and its tests: a TCP server
that accepts connections and never answers (a black hole: a firewalled or hung engine), a
port nobody listens on (a stopped engine), and a backend that asks such an address over TCP
for every call, as the remote backends (Ray, Slurm, Kubernetes) ask their engines."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flotilla.backends.interface import (
    BackendUnavailable,
    CancelRequest,
    CancelResult,
    DispatchRequest,
    DispatchResult,
    Inventory,
    LogChunk,
    LogsRequest,
    RunStatus,
    StatusRequest,
)
from flotilla.model.cluster import ClusterSpec
from flotilla.model.fleet import Fleet
from flotilla.service.fleet import fleet_change
from flotilla.store import SqlStore


class BlackHole:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.address: tuple[str, int] = self._server.getsockname()
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="black-hole")
        self._thread.start()

    def _accept(self) -> None:
        self._server.settimeout(0.1)
        while not self._stop.is_set():
            try:
                connection, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(connection)  # held open, never read, never answered

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for connection in self._held:
            connection.close()
        self._server.close()

    def __enter__(self) -> BlackHole:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def refusing_address() -> Iterator[tuple[str, int]]:
    """An address whose port nobody listens on: a connection is refused at once."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    address: tuple[str, int] = probe.getsockname()
    probe.close()
    yield address


class RemoteBackend:
    """A backend whose every call asks its engine at ``address`` over TCP and waits for an
    answer for ``timeout`` seconds (None: for ever, as a client with no timeout), like the
    remote backends: a refused connection or a timeout is ``BackendUnavailable`` with the
    socket error's text. It never gets an answer from a black hole or a closed port, so it
    has no runs: only the cost of asking is real."""

    name = "remote"

    def __init__(
        self, cluster: str, address: tuple[str, int], timeout: float | None = None
    ) -> None:
        self.cluster = cluster
        self.address = address
        self.timeout = timeout
        self.calls = 0

    def _ask(self, what: str) -> Any:
        self.calls += 1
        try:
            with socket.create_connection(self.address, timeout=self.timeout) as connection:
                connection.sendall(what.encode() + b"\n")
                answer = connection.recv(1)
        except OSError as error:
            raise BackendUnavailable(
                f"cannot reach {self.cluster} at {self.address[0]}:{self.address[1]}: "
                f"{error!r}\nHTTPConnectionPool(host=..., port=...): Max retries exceeded"
            ) from None
        raise BackendUnavailable(f"{self.cluster} answered {answer!r}")

    def inventory(self) -> Inventory:
        return self._ask("inventory")  # type: ignore[no-any-return]

    def dispatch(self, request: DispatchRequest) -> DispatchResult:
        return self._ask("dispatch")  # type: ignore[no-any-return]

    def cancel(self, request: CancelRequest) -> CancelResult:
        return self._ask("cancel")  # type: ignore[no-any-return]

    def status(self, request: StatusRequest) -> RunStatus:
        return self._ask("status")  # type: ignore[no-any-return]

    def poll(self) -> list[RunStatus]:
        return self._ask("poll")  # type: ignore[no-any-return]

    def logs(self, request: LogsRequest) -> LogChunk:
        return self._ask("logs")  # type: ignore[no-any-return]

    def close(self) -> None:
        pass


def remote_cluster_spec(name: str, cpu: float = 64) -> ClusterSpec:
    """A remote cluster as the store kept it from an earlier answer: one node of ``cpu``."""
    return ClusterSpec.model_validate(
        {
            "name": name,
            "backend": "remote",
            "nodes": [{"name": f"{name}-n", "count": 1, "resources": {"cpu": cpu}}],
        }
    )


def declare_clusters(store: SqlStore, backends: dict[str, str]) -> None:
    """Record clusters (name → backend) as a fleet apply does before any answered: no nodes
    yet, ``unreachable``, with a ``default`` queue."""
    fleet = Fleet.model_validate(
        {
            "clusters": [{"name": name, "backend": kind} for name, kind in backends.items()],
            "queues": [{"name": "default"}],
        }
    )
    store.apply_fleet(fleet_change(fleet))
