"""Start the API server. ``flotilla serve`` and ``flotilla up`` both go through here, so the
refusal to listen beyond loopback without tokens cannot be bypassed by a new entry point."""

from __future__ import annotations

import uvicorn
from fastapi import FastAPI

from flotilla.server.auth import check_bind
from flotilla.server.context import ServerContext

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8467


def run_server(app: FastAPI, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Serve ``app`` until interrupted. Raises ``InsecureBindError`` before listening if
    ``host`` is not loopback and the app has no token config."""
    context: ServerContext = app.state.flotilla
    check_bind(host, context.auth)
    # Access logs show method, path and status; tokens travel in a header and never appear.
    uvicorn.run(app, host=host, port=port, log_level="info", proxy_headers=False)
