"""The composition root: where the service is built from its parts.

``build_service(ServiceConfig)`` opens the store, builds the clusters' backends (a fleet, or
this machine as one local cluster), the scheduling loop over them and, when asked, the REST
API; ``Service`` starts and stops them. ``flotilla up``, ``flotilla serve``
(``build_api_service``), the tests and the benchmarks all build the service here, so that
what a test runs is what a user starts. This layer sits above the server and the service and
below the CLI: it imports them, and nothing below it imports it.
"""

from __future__ import annotations

from flotilla.app.composition import (
    ApiService,
    Service,
    build_api_service,
    build_service,
    settle_process,
)
from flotilla.app.config import ApiConfig, ApiServiceConfig, ServiceConfig, StartupError

__all__ = [
    "ApiConfig",
    "ApiService",
    "ApiServiceConfig",
    "Service",
    "ServiceConfig",
    "StartupError",
    "build_api_service",
    "build_service",
    "settle_process",
]
