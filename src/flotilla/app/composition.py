"""``build_service``: the one place the service is put together from its parts, and
``Service``: what it built, with ``start``/``stop`` for the scheduler's thread, the wake
listener and (optionally) the REST API.

What ``flotilla up`` runs is built here, and so is what the tests and the benchmarks run:
a test that needs a part of its own (a fake backend, a backend with a short grace period, a
store it opened, a fault) hands it to the builder (``backends=``, ``store=``,
``backend_factory=``) instead of wiring a loop by hand. Who makes a part closes it: the
service closes the store and the backends it built, never those it was handed.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Mapping
from types import TracebackType

from fastapi import FastAPI

from flotilla.app.clusters import (
    connect_clusters,
    gpu_notices,
    isolation_notices,
    leftover_cgroup_notices,
)
from flotilla.app.clusters import register_clusters as register
from flotilla.app.config import ApiConfig, ApiServiceConfig, ServiceConfig, StartupError
from flotilla.app.store import ensure_default_queue, open_store
from flotilla.backends import Backend
from flotilla.secrets import SecretBox
from flotilla.service.engines import ClusterEngine, at_arms_length, wake_on_late_answers
from flotilla.service.fleet import FleetRuntime
from flotilla.service.loop import SchedulingLoop
from flotilla.service.projection import Projection
from flotilla.store import SqlStore
from flotilla.store.wake import WakeListener

JOIN_SECONDS = 30.0
"""How long ``stop`` waits for the scheduler's thread to end its cycle."""


def settle_process() -> None:
    """Once start-up is done, in a process that serves: freeze what start-up made for the
    collector (``collector.py``) and start the stall probe when ``FLOTILLA_STALL_PROBE``
    arms it (a benchmark diagnostic, off by default)."""
    from flotilla.collector import settle_collector
    from flotilla.stall_probe import start_if_armed

    settle_collector()
    start_if_armed()


def _api_app(
    store: SqlStore,
    loop: SchedulingLoop | None,
    api: ApiConfig,
    secrets: SecretBox,
    projection: Projection | None = None,
) -> FastAPI:
    from flotilla.server import allowed_hosts_for, create_app

    return create_app(
        store,
        loop,
        api.auth,
        poll_interval=api.poll_interval,
        allowed_hosts=None if api.any_host else allowed_hosts_for(api.host),
        secrets=secrets,
        projection=projection,
    )


def _serve(
    app: FastAPI,
    api: ApiConfig,
    listener: socket.socket | None,
    drain: Callable[[threading.Event], None] | None,
) -> None:
    from flotilla.server import run_server  # looked up now: tests replace it
    from flotilla.web import mount_dashboard

    run_server(
        mount_dashboard(app),
        api.host,
        api.port,
        local_token=api.local_token,
        listener=listener,
        drain=drain,
    )


class Service:
    """The service ``build_service`` put together: the store, the clusters' backends (through
    the fleet runtime, or as handed to the builder), the scheduling loop over them, and the
    REST API when the config asks for one. ``notices``: what ``flotilla up`` tells the user
    about it (clusters, scheduling, what is not enforced, GPUs)."""

    def __init__(
        self,
        config: ServiceConfig,
        store: SqlStore,
        loop: SchedulingLoop,
        *,
        runtime: FleetRuntime | None,
        secrets: SecretBox,
        notices: list[str],
        owns_store: bool,
    ) -> None:
        self.config = config
        self.store = store
        self.loop = loop
        self.runtime = runtime
        """The fleet runtime that built the backends; None when they were handed in."""
        self.secrets = secrets
        self.notices = notices
        self._owns_store = owns_store
        self._stop = threading.Event()
        self._scheduler: threading.Thread | None = None
        self._wakes: WakeListener | None = None
        self._app: FastAPI | None = None
        self._stopped = False
        self.projection = _projection(config, store, loop)
        """Each waiting job's estimated start, kept in the background (None: off)."""

    @property
    def backends(self) -> Mapping[str, Backend]:
        """Cluster name → its backend (the fleet's, changed in place when one is applied)."""
        return self.loop.backends

    @property
    def scheduling(self) -> bool:
        """True while the scheduler's thread runs."""
        return self._scheduler is not None and self._scheduler.is_alive()

    def start(self) -> None:
        """Run the scheduling loop on a thread of its own, and wake it when another process
        commits a submission or a cancel (PostgreSQL NOTIFY, or a socket beside an SQLite
        file: ``store/wake.py``). Without ``start`` a test cycles the loop by hand."""
        if self._scheduler is not None:
            raise RuntimeError("the service was started already")
        self._scheduler = threading.Thread(
            target=self.loop.run, args=(self._stop,), name="flotilla-scheduler"
        )
        self._scheduler.start()
        self._wakes = self.store.listen_for_wakes(self.loop.wake)
        if self.projection is not None:
            self.projection.start()

    def app(self) -> FastAPI:
        """The REST API over this service (built once); the config must ask for one."""
        if self.config.api is None:
            raise RuntimeError("the service was configured without an API (api=None)")
        if self._app is None:
            self._app = _api_app(
                self.store, self.loop, self.config.api, self.secrets, self.projection
            )
        return self._app

    def serve(
        self,
        listener: socket.socket | None = None,
        drain: Callable[[threading.Event], None] | None = None,
    ) -> None:
        """Serve the REST API (and the dashboard) until interrupted; ``listener``: the socket
        bound before start-up (else one is bound here); ``drain``: run on a thread at the
        first signal, the API answering meanwhile (``flotilla up --drain``)."""
        assert self.config.api is not None
        _serve(self.app(), self.config.api, listener, drain)

    def stop(self) -> None:
        """Stop the wake listener and the scheduler (its cycle ends, its lease is released),
        then close what the builder made: the fleet's backends and the store, unless they
        were handed in. Running jobs keep running. Stopping twice does nothing."""
        if self._stopped:
            return
        self._stopped = True
        try:
            if self.projection is not None:
                self.projection.stop()
            if self._wakes is not None:
                self._wakes.close()
            self._stop.set()
            self.loop.wake()  # not a cycle interval later
            if self._scheduler is not None:
                self._scheduler.join(timeout=JOIN_SECONDS)  # its run() closes the loop
            else:
                self.loop.close()
        finally:
            if self.runtime is not None:
                self.runtime.close()
            else:  # handed in: only the workers that kept them at arm's length
                for backend in self.loop.backends.values():
                    if isinstance(backend, ClusterEngine):
                        backend.close()
            if self._owns_store:
                self.store.close()

    def __enter__(self) -> Service:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def build_service(
    config: ServiceConfig,
    *,
    store: SqlStore | None = None,
    backends: Mapping[str, Backend] | None = None,
    backend_factory: Callable[..., Backend] | None = None,
    register_clusters: bool = True,
) -> Service:
    """The service ``config`` describes, not yet started. ``StartupError`` (one line naming
    what is wrong) when it cannot be built; nothing is left open then.

    For tests and benchmarks, parts to use instead of building them: ``store``, an open
    store (its opener closes it); ``backends``, fixed clusters instead of the fleet or this
    machine's local cluster (recorded in the store from their inventories, with a
    ``default`` queue, unless ``register_clusters`` is False; their maker closes them);
    ``backend_factory``, how the fleet runtime builds each cluster's backend instead of by
    entry point."""
    if store is not None:
        return _build(config, store, backends, backend_factory, register_clusters, False)
    if config.db is None:
        raise StartupError("--db: no database given")
    opened = open_store(config.db)
    try:
        return _build(config, opened, backends, backend_factory, register_clusters, True)
    except BaseException:
        opened.close()
        raise


def _build(
    config: ServiceConfig,
    store: SqlStore,
    backends: Mapping[str, Backend] | None,
    backend_factory: Callable[..., Backend] | None,
    register_clusters: bool,
    owns_store: bool,
) -> Service:
    secrets = SecretBox.from_file(config.secret_key_file)
    if backends is not None:
        if register_clusters:
            register(store, backends)
        kept = (
            dict(backends)
            if config.engines is None
            else at_arms_length(backends, config.engines, owns=False)  # their maker closes them
        )
        loop = SchedulingLoop(store, kept, config.loop, secrets=secrets)
        wake_on_late_answers(loop.backends, loop.wake)
        notices = [_scheduling(loop)]
        return Service(
            config,
            store,
            loop,
            runtime=None,
            secrets=secrets,
            notices=notices,
            owns_store=owns_store,
        )
    runtime = FleetRuntime(
        store,
        {},
        local_state_dir=config.state_dir,
        local_run_as=config.run_as,
        local_uid_range=config.uid_range,
        local_working_dirs=config.allowed_working_dirs or (),
        factory=backend_factory,
        engines=config.engines,
    )
    try:
        notices = connect_clusters(store, runtime, config)
        loop = SchedulingLoop(store, {}, config.loop, fleet=runtime, secrets=secrets)
        runtime.on_late_answer = loop.wake  # the engines a fleet apply builds from now on
        wake_on_late_answers(runtime.backends, loop.wake)
    except BaseException:
        runtime.close()
        raise
    if runtime.fleet is None:  # the embedded default: one line, as it always was
        notices[-1] += f"; {_scheduling(loop)}"
    else:
        notices.append(_scheduling(loop))
    notices += isolation_notices(runtime.backends)  # what of a job's requests is not enforced
    notices += leftover_cgroup_notices(runtime.backends)  # what a server killed before left
    notices += gpu_notices(runtime.backends)  # the GPUs found here, and how (NVML, or as told)
    return Service(
        config,
        store,
        loop,
        runtime=runtime,
        secrets=secrets,
        notices=notices,
        owns_store=owns_store,
    )


def _projection(config: ServiceConfig, store: SqlStore, loop: SchedulingLoop) -> Projection | None:
    """The background projection the config asks for (not started), simulating with the
    loop's own scheduling settings; its child process opens the database itself."""
    if config.projection is None:
        return None
    from flotilla.model.scenario import Settings

    scheduling = Settings(
        cycle_interval=loop.settings.cycle_interval,
        mode=loop.settings.mode,
        assignment_strategy=loop.settings.scheduling.assignment_strategy,
    )
    return Projection(
        store, config.projection, scheduling, pace=loop.precedence.pace, database=config.db
    )


def _scheduling(loop: SchedulingLoop) -> str:
    return f"{loop.settings.mode.value} scheduling every {loop.settings.cycle_interval:g}s"


class ApiService:
    """``flotilla serve``: the REST API alone over a database; a scheduler elsewhere (``flotilla
    up --no-api``) finds its submissions. ``notices``: what to tell the user."""

    def __init__(
        self, config: ApiServiceConfig, store: SqlStore, secrets: SecretBox, notices: list[str]
    ) -> None:
        self.config = config
        self.store = store
        self.secrets = secrets
        self.notices = notices
        self._app: FastAPI | None = None

    def app(self) -> FastAPI:
        if self._app is None:
            self._app = _api_app(self.store, None, self.config.api, self.secrets)
        return self._app

    def serve(self, listener: socket.socket | None = None) -> None:
        _serve(self.app(), self.config.api, listener, None)

    def stop(self) -> None:
        self.store.close()

    def __enter__(self) -> ApiService:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def build_api_service(config: ApiServiceConfig) -> ApiService:
    """The API of ``flotilla serve`` over ``config.db`` (a ``default`` queue made in a fresh
    database). ``StartupError`` naming ``--db`` when the database cannot be opened."""
    store = open_store(config.db)
    try:
        created = ensure_default_queue(store)
        secrets = SecretBox.from_file(config.secret_key_file)
    except BaseException:
        store.close()
        raise
    return ApiService(config, store, secrets, [created] if created else [])
