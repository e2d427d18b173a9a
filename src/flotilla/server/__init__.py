"""The REST API server (FastAPI): jobs, queues, quotas, clusters, reports, metrics, health.

``create_app(store, scheduler, auth)`` builds the app; ``run_server(app, host, port)`` serves
it (refusing a non-loopback address without tokens). See docs/api.md.
"""

from flotilla.server.app import create_app
from flotilla.server.auth import AuthSettings, InsecureBindError, Permission, User, check_bind
from flotilla.server.run import DEFAULT_HOST, DEFAULT_PORT, run_server

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "AuthSettings",
    "InsecureBindError",
    "Permission",
    "User",
    "check_bind",
    "create_app",
    "run_server",
]
