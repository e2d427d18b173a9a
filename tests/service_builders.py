"""Services for tests, built by the composition root (``flotilla.app``) as ``flotilla up``
builds them, over the parts a test brings: a sim or local backend of its own (a short grace
period, a fault), a store it opened. No test wires a ``SchedulingLoop`` by hand."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from flotilla.app import ApiConfig, Service, ServiceConfig, build_service
from flotilla.backends import Backend
from flotilla.service.engines import EngineSettings
from flotilla.service.loop import LoopSettings, SchedulingLoop
from flotilla.store import SqlStore

TEST_API = ApiConfig(poll_interval=0.05, any_host=True)
"""The API as tests reach it: through ``TestClient`` (its ``Host`` is ``testserver``), event
streams polled every 50 ms."""


def service_over(
    backends: Mapping[str, Backend],
    *,
    store: SqlStore | None = None,
    root: Path | None = None,
    api: ApiConfig | None = None,
    register: bool = True,
    settings: LoopSettings | None = None,
    engines: EngineSettings | None = None,
    **fields: Any,
) -> Service:
    """The service over ``backends`` (recorded as clusters with a ``default`` queue unless
    ``register`` is False), each kept at arm's length by ``engines`` (the defaults of
    ``flotilla up`` when None), its loop's settings ``settings`` with ``fields`` changed; over
    ``store``, or an SQLite file under ``root`` that the service owns (its secret key
    beside it)."""
    config = ServiceConfig(
        db=f"sqlite:///{root / 'flotilla.db'}" if root is not None else None,
        loop=replace(settings or LoopSettings(), **fields),
        api=api,
        secret_key_file=root / "secret.key" if root is not None else None,
        engines=engines or EngineSettings(),
    )
    return build_service(config, store=store, backends=backends, register_clusters=register)


def loop_over(
    store: SqlStore,
    backends: Mapping[str, Backend],
    *,
    register: bool = True,
    settings: LoopSettings | None = None,
    **fields: Any,
) -> SchedulingLoop:
    """The scheduling loop the root builds over ``store`` and ``backends``, not started: the
    test cycles it by hand and closes it (the store and the backends stay the test's)."""
    return service_over(backends, store=store, register=register, settings=settings, **fields).loop
