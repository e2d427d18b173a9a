"""What the service is built from: ``ServiceConfig`` (what ``flotilla up`` takes, its flags
parsed and checked), ``ApiConfig`` (where the REST API listens and whom it answers),
``ApiServiceConfig`` (``flotilla serve``: the API alone), and ``StartupError`` (a
configuration the service cannot start with, in the words the user is shown)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from flotilla.model.fleet import Fleet
from flotilla.server import AuthSettings
from flotilla.service.engines import EngineSettings
from flotilla.service.loop import LoopSettings
from flotilla.service.projection import ProjectionSettings


class StartupError(Exception):
    """The service cannot start: ``message`` is one line naming what is wrong (the option,
    the file, the cluster), ``problems`` one line each when there are several."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.problems = list(problems or [])


@dataclass(frozen=True)
class ApiConfig:
    """The REST API of a service: where it listens and whom it answers."""

    host: str = "127.0.0.1"
    port: int = 8467
    auth: AuthSettings = field(default_factory=AuthSettings.disabled)
    local_token: str | None = None
    """The token made for this start when no token config is given (``server_auth``)."""
    poll_interval: float = 0.2
    """How often an event stream looks for new events (seconds)."""
    any_host: bool = False
    """Answer requests for any ``Host`` name (tests' clients send ``testserver``); by
    default only the names of the listen address (``allowed_hosts_for``)."""


@dataclass(frozen=True)
class ServiceConfig:
    """The service ``flotilla up`` starts: the database, the clusters (a fleet, or this
    machine as one local cluster), the scheduling loop's settings and, with ``api``, the
    REST API in the same process."""

    db: str | None = None
    """Database URL; None only when the builder is handed an open store."""
    loop: LoopSettings = field(default_factory=LoopSettings)
    engines: EngineSettings | None = field(default_factory=EngineSettings)
    """How far each cluster's engine is kept (``service/engines.py``: every call on workers
    of its cluster, with a timeout and a backoff); None: the backends are called directly."""
    state_dir: Path = Path(".flotilla/local")
    """Where a local cluster keeps its runs and their logs."""
    cluster: str = "local"
    """The name of this machine's cluster when there is no fleet."""
    fleet: Fleet | None = None
    """A fleet to apply at start (already checked: ``check_fleet``); None: the fleet the
    database holds, else this machine as one local cluster."""
    fleet_source: Path | None = None
    """Where ``fleet`` was read from (named in messages)."""
    run_as: str | None = None
    """The user every local job runs as (None: this user, or a uid per owner)."""
    uid_range: str | None = None
    """``FIRST-LAST``: the uids local owners get one each of (needs root)."""
    allowed_working_dirs: tuple[str, ...] | None = None
    """``flotilla up --allow-working-dir``: the absolute directories local jobs may run in
    (a local cluster of a fleet file that names none takes these); None: this machine's own
    cluster takes any directory its job's user may enter (``LocalBackend.any_working_dir``)."""
    api: ApiConfig | None = None
    """Serve the REST API in this process; None: the scheduler and its clusters alone."""
    projection: ProjectionSettings | None = None
    """The background projection that estimates each waiting job's start
    (``service/projection.py``); None: off."""
    secret_key_file: Path | None = None
    """The key that seals jobs' secret values (None: ``FLOTILLA_SECRET_KEY_FILE``, else
    ``~/.local/state/flotilla/secret.key``; made if missing)."""


@dataclass(frozen=True)
class ApiServiceConfig:
    """``flotilla serve``: the REST API alone over a database, no scheduler."""

    db: str
    api: ApiConfig = field(default_factory=ApiConfig)
    secret_key_file: Path | None = None
