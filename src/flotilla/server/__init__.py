"""The REST API server (FastAPI): jobs, queues, quotas, clusters, reports, metrics, health.

``create_app(store, scheduler, auth)`` builds the app; ``run_server(app, host, port)`` serves
it (refusing a non-loopback address without tokens). See docs/api.md.
"""

from flotilla.server.app import create_app
from flotilla.server.auth import AuthSettings, InsecureBindError, Permission, User, check_bind
from flotilla.server.run import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    ListenError,
    allowed_hosts_for,
    bind_listener,
    run_server,
    server_auth,
)

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "AuthSettings",
    "InsecureBindError",
    "ListenError",
    "Permission",
    "User",
    "allowed_hosts_for",
    "bind_listener",
    "check_bind",
    "create_app",
    "run_server",
    "server_auth",
]
