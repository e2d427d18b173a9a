"""Start the API server. ``flotilla serve`` and ``flotilla up`` both go through here, so the
refusal to listen beyond loopback without tokens cannot be bypassed by a new entry point."""

from __future__ import annotations

import errno
import os
import pwd
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import uvicorn
from fastapi import FastAPI

from flotilla.runtime import is_loopback, new_token, remove_server_file, write_server_file
from flotilla.server.auth import AuthSettings, check_bind
from flotilla.server.context import ServerContext
from flotilla.server.guard import LOOPBACK_HOSTS

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8467


def _exit_on_sigterm(number: int, _frame: object) -> None:
    raise SystemExit(128 + number)


def server_auth(auth_file: Path | None, host: str) -> tuple[AuthSettings, str | None]:
    """The auth of ``flotilla up``/``serve``: the token config if given, else a local token
    generated now (returned, for ``run_server`` to write where the CLI finds it). Raises
    ``SpecError`` for a bad token config and ``InsecureBindError`` for a non-loopback host
    without one."""
    if auth_file is not None:
        settings = AuthSettings.from_file(auth_file)
        check_bind(host, settings)
        return settings, None
    check_bind(host, AuthSettings.disabled())
    token = new_token()
    return AuthSettings.local(token, server_user()), token


def server_user() -> str | None:
    """The login name of the user this server runs as (the owner of what its local token
    submits); None when the account has no name."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return None


def allowed_hosts_for(host: str) -> frozenset[str] | None:
    """A server listening on loopback answers to loopback ``Host`` names only."""
    return LOOPBACK_HOSTS if is_loopback(host) else None


class ListenError(OSError):
    """The address cannot be listened on (a port in use, an address not of this host)."""


def bind_listener(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``, for ``run_server``. ``flotilla up``/``serve`` call it
    before opening anything, so a port in use is one line and nothing was started or printed.
    Raises ``ListenError`` saying what to do."""
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM
        )[0]
    except (socket.gaierror, UnicodeError) as error:
        raise ListenError(f"--host {host}: not an address of this machine ({error})") from None
    listener = socket.socket(family, kind, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
    except OSError as error:
        listener.close()
        if error.errno == errno.EADDRINUSE:
            raise ListenError(
                f"port {port} on {host} is in use (another flotilla up or serve?): stop it or "
                "choose another with --port"
            ) from None
        raise ListenError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    listener.set_inheritable(True)
    return listener


class _DrainingServer(uvicorn.Server):
    """uvicorn's server, which with a ``drain`` keeps serving through the first stop signal
    until the drain is over (the API answers reads while running jobs end)."""

    def __init__(self, config: uvicorn.Config, drain: Callable[[threading.Event], None] | None):
        super().__init__(config)
        self._drain = drain
        self._interrupted = threading.Event()
        self._draining = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._drain is None or self._interrupted.is_set():
            super().handle_exit(sig, frame)
            return
        if self._draining:  # a second signal: stop waiting, stop now
            self._interrupted.set()
            self.should_exit = True
            return
        self._draining = True
        drain = self._drain

        def drain_then_stop() -> None:
            try:
                drain(self._interrupted)
            finally:
                self.should_exit = True

        threading.Thread(target=drain_then_stop, name="flotilla-drain", daemon=True).start()


def run_server(
    app: FastAPI,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    local_token: str | None = None,
    listener: socket.socket | None = None,
    drain: Callable[[threading.Event], None] | None = None,
) -> None:
    """Serve ``app`` until interrupted. Raises ``InsecureBindError`` before listening if
    ``host`` is not loopback and the app has no token config. ``listener``: a socket from
    ``bind_listener`` (else one is bound here; ``ListenError`` if it cannot be). ``local_token``
    is written to this user's runtime file for the port (``flotilla.runtime``) while the
    server runs. ``drain``: run on a thread at the first Ctrl-C or SIGTERM while the API keeps
    answering (``flotilla up --drain``), then the server stops; a second signal sets the event
    it was given and stops the server at once."""
    context: ServerContext = app.state.flotilla
    check_bind(host, context.auth)
    if listener is None:
        listener = bind_listener(host, port)
    port = listener.getsockname()[1]
    if local_token is not None:
        path = write_server_file(port, local_token)
        print(
            f"  API token (for this user only) in {path}; the CLI reads it, and "
            "`flotilla ui` prints the dashboard's signed-in address",
            flush=True,
        )
    previous = None
    if threading.current_thread() is threading.main_thread():
        # uvicorn shuts down gracefully on SIGTERM, then raises the signal again for the
        # handler that was there before it: the default one would end the process at once,
        # skipping every ``finally`` (this token file, the scheduler's and backend's close).
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        # Access logs show method, path and status; tokens travel in a header, never appear.
        config = uvicorn.Config(app, host=host, port=port, log_level="info", proxy_headers=False)
        _DrainingServer(config, drain).run(sockets=[listener])
    except KeyboardInterrupt:  # uvicorn raises the SIGINT it captured again once it stopped
        pass
    finally:
        listener.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if local_token is not None:
            remove_server_file(port, local_token)
