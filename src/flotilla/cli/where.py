"""Where the user is (issue 37): a command job submitted by ``run`` or ``submit`` runs in the
directory it was submitted from, with the submitter's environment, as ``sbatch`` does
(``--chdir`` and ``--export=ALL`` by default) — when the server is on this machine, so that
the directory is one of the machine the job runs on. The job's account must be able to enter
the directory: the local backend enters it as that account, and a run that cannot says how to
let it in.

``--export`` is Slurm's: ``ALL`` (the default), ``NONE`` (only ``--env``), or
``VAR,VAR=value,…`` (only those; ``ALL,VAR=value`` adds to all). ``ALL`` leaves out what is not
the job's to have (``EXPORT_SKIPPED``): Flotilla's own variables (its token, its server), names
that look like credentials (a job's environment is stored with the job and shown to whoever may
read it: pass secrets as ``secrets:``), the login session's own (``HOME``, ``USER``, ``PWD``,
``SSH_*``…: the backend sets the account's), and ``LD_PRELOAD``. A variable named explicitly is
the user's word, except Flotilla's own.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from flotilla.cli.client import fail

HERE_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"})

EXPORT_SKIPPED = re.compile(
    r"^(FLOTILLA_.*|_|PWD|OLDPWD|SHLVL|HOME|USER|LOGNAME|MAIL|SHELL|LD_PRELOAD|LS_COLORS"
    r"|SSH_.*|DBUS_.*|XDG_.*|DISPLAY|XAUTHORITY|WAYLAND_DISPLAY|GPG_.*|KRB5.*"
    r"|.*(TOKEN|SECRET|PASSW|CREDENTIAL|PRIVATE).*|(.*_)?(API_?)?KEY(_.*)?)$",
    re.IGNORECASE,
)
"""What ``--export=ALL`` leaves out (the module docstring says why)."""

FLOTILLA_OWN = re.compile(r"^FLOTILLA_")


@dataclass(frozen=True)
class Export:
    """``--export`` read: ``everything`` (ALL), plus ``names`` to copy and ``values`` set."""

    everything: bool
    names: tuple[str, ...] = ()
    values: Mapping[str, str] = field(default_factory=dict)


def parse_export(value: str) -> Export:
    """``ALL``, ``NONE`` or ``[ALL,]VAR[=value],…``; exit 2 naming ``--export`` otherwise."""
    words = [word.strip() for word in value.split(",") if word.strip()]
    if not words:
        fail("--export: give ALL, NONE or VAR[,VAR=value…]", code=2)
    if [word.upper() for word in words] == ["NONE"]:
        return Export(everything=False)
    everything = words[0].upper() == "ALL"
    names: list[str] = []
    values: dict[str, str] = {}
    for word in words[1:] if everything else words:
        name, sep, assigned = word.partition("=")
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name) or name.upper() in ("ALL", "NONE"):
            fail(f"--export: {word!r} is not VAR or VAR=value (ALL or NONE come alone)", code=2)
        if FLOTILLA_OWN.match(name):
            fail(f"--export: {name} is Flotilla's own; the backend sets it for the job", code=2)
        if sep:
            values[name] = assigned
        else:
            names.append(name)
    return Export(everything, tuple(names), values)


def exported_env(export: Export, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables ``export`` gives the job from ``environ`` (the submitter's)."""
    env: dict[str, str] = {}
    if export.everything:
        env = {
            name: value
            for name, value in environ.items()
            if not EXPORT_SKIPPED.match(name) and "\0" not in value
        }
    for name in export.names:
        if name in environ:
            env[name] = environ[name]
    env.update(export.values)
    return env


def server_is_here(server: str) -> bool:
    """Whether ``server`` (a URL) is on this machine: a loopback name or address, or this
    machine's own name."""
    host = (urlsplit(server).hostname or "").lower()
    if host in HERE_HOSTS or host.startswith("127."):
        return True
    names = {socket.gethostname().lower(), socket.getfqdn().lower()}
    return host in names


def place_here(
    payload: dict[str, Any],
    *,
    server: str,
    export: Export,
    cwd: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Give a command payload (one with a ``command``) the submit directory (unless it names
    a ``working_dir``) and the exported environment (below its own ``env``), when ``server``
    is on this machine;
    elsewhere only ``--export``'s explicit names and values (the directory and the rest of
    the environment are this machine's, not the job's)."""
    if "command" not in payload:  # a simulated job's behaviour (``sim``) only: no process
        return
    environ = os.environ if environ is None else environ
    here = server_is_here(server)
    if not here:
        export = Export(False, export.names, export.values)
    env = exported_env(export, environ)
    if env:
        payload["env"] = {**env, **(payload.get("env") or {})}
    if here and not payload.get("working_dir"):
        payload["working_dir"] = os.getcwd() if cwd is None else cwd
