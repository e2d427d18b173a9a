"""A cluster's backend settings as its backend is built with them: every secret reference
resolved (from this process's environment and files), each secret-fed setting converted to the
type the backend's factory declares, and nothing of a secret's value in any problem.

A secret reference (``{env: NAME}``, ``{file: PATH}``) yields text. A backend that takes a
number (a timeout, a port, a count) was handed that text and failed later, once per cycle,
with the text in its error (issue 23: ``{file: /etc/shadow}`` on a numeric setting logged the
file 1,300 times). So the text is converted here, before the backend is built, to what the
factory's signature declares (``float``, ``int``, ``bool``); a value that does not convert is
a problem naming the field and the reference, never quoting the value. Every resolved value
is also handed to ``flotilla.secrets.hide_in_logs``, so that a message that quotes one anyway
(a backend's own error) is logged with it hidden.
"""

from __future__ import annotations

import inspect
import math
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flotilla.model.fleet import FleetCluster, secret_reference
from flotilla.secrets import HIDDEN, MIN_HIDDEN_LENGTH, hide_in_logs

_WHAT = {float: "a number", int: "a whole number", bool: "true or false"}


@dataclass(frozen=True)
class ResolvedSettings:
    """``values``: the settings to build the backend with; ``problems``: why it cannot be
    built (``clusters[1].settings.token: environment variable … is not set``), never quoting a
    value; ``secrets``: the resolved secret texts."""

    values: dict[str, Any]
    problems: list[str]
    secrets: tuple[str, ...] = ()

    def scrub(self, text: str) -> str:
        """``text`` with every resolved secret (and every line of one) hidden."""
        return scrub(text, self.secrets)


def scrub(text: str, secrets: tuple[str, ...] | list[str]) -> str:
    """``text`` with each of ``secrets`` and each line of one replaced by ``(hidden)``: an
    error quotes a value with ``repr``, which escapes its newlines, so a multi-line secret
    appears there line by line (parts shorter than ``MIN_HIDDEN_LENGTH`` are left)."""
    parts = {
        part.strip()
        for secret in secrets
        for part in (secret, *secret.splitlines())
        if len(part.strip()) >= MIN_HIDDEN_LENGTH
    }
    for part in sorted(parts, key=len, reverse=True):
        text = text.replace(part, HIDDEN)
    return text


def _settings_target(factory: Callable[..., Any] | None) -> Any:
    """What declares ``factory``'s settings: the factory itself, or for a ``**config``
    factory the class it builds (as its return annotation says); ``None``: unknown."""
    if factory is None:
        return None
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return getattr(factory, "__wrapped_backend__", None) or _returned_class(factory)
    return factory


def shown_settings(factory: Callable[..., Any] | None) -> frozenset[str]:
    """The settings whose values the backend shows (as a node's name in the API, logs and
    jobs' environments): a backend lists them in ``SHOWN_SETTINGS``. A secret cannot be one."""
    found: frozenset[str] = getattr(_settings_target(factory), "SHOWN_SETTINGS", frozenset())
    return frozenset(found)


def setting_types(factory: Callable[..., Any] | None) -> dict[str, Any]:
    """The type each setting of ``factory`` declares (its parameters', or for a
    ``**config`` factory those of the class it builds, as its return annotation says)."""
    target = _settings_target(factory)
    if target is None:
        return {}
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # an annotation that does not resolve here: leave the values as text
        return {}
    hints.pop("return", None)
    return hints


def _returned_class(factory: Callable[..., Any]) -> Any:
    try:
        target = typing.get_type_hints(factory).get("return")
    except Exception:
        return None
    return target if inspect.isclass(target) else None


def _scalar(annotation: Any) -> type | None:
    """``float``, ``int`` or ``bool`` when ``annotation`` is one (or one or None)."""
    if annotation in _WHAT:
        return typing.cast(type, annotation)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        kinds = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(kinds) == 1 and kinds[0] in _WHAT:
            return typing.cast(type, kinds[0])
    return None


def _convert(text: str, kind: type) -> Any:
    """``text`` as ``kind``; raises ``ValueError`` whose message holds nothing of ``text``."""
    word = text.strip()
    if kind is bool:
        if word.lower() in ("true", "yes", "1"):
            return True
        if word.lower() in ("false", "no", "0"):
            return False
        raise ValueError
    try:
        number = int(word) if kind is int else float(word)
    except ValueError:
        raise ValueError from None
    if kind is float and not math.isfinite(number):
        raise ValueError
    return number


def resolve(
    cluster: FleetCluster,
    index: int,
    environ: Mapping[str, str] | None = None,
    factory: Callable[..., Any] | None = None,
) -> ResolvedSettings:
    """The cluster's settings with every secret reference replaced by its value (converted
    to the type ``factory`` declares for it), and the problems."""
    environ = os.environ if environ is None else environ
    types_of = setting_types(factory)
    shown = shown_settings(factory)
    values: dict[str, Any] = {}
    problems: list[str] = []
    secrets: list[str] = []
    for key, value in cluster.settings.items():
        path = f"clusters[{index}].settings.{key}"
        reference = secret_reference(value)
        if reference is None:
            values[key] = value
            continue
        if key in shown:
            problems.append(
                f"{path}: this setting is shown (node lists, logs, jobs' environments), so it "
                "cannot be a secret reference: give its value"
            )
            continue
        kind, target = reference
        source = f"environment variable {target}" if kind == "env" else f"secret file {target}"
        if kind == "env":
            if target not in environ:
                problems.append(f"{path}: {source} is not set")
                continue
            text = environ[target]
        else:
            try:
                text = Path(target).read_text(encoding="utf-8").rstrip("\n")
            except OSError as error:
                problems.append(f"{path}: cannot read {source}: {error.strerror}")
                continue
            except UnicodeDecodeError:
                problems.append(f"{path}: {source} is not UTF-8 text")
                continue
        secrets.append(text)
        wanted = _scalar(types_of.get(key))
        if wanted is None:
            values[key] = text
            continue
        try:
            values[key] = _convert(text, wanted)
        except ValueError:
            problems.append(
                f"{path}: {source} does not hold {_WHAT[wanted]}, which this setting takes "
                "(its content is not shown)"
            )
    hide_in_logs(secrets)
    return ResolvedSettings(values, problems, tuple(secrets))


def resolve_settings(
    cluster: FleetCluster,
    index: int,
    environ: Mapping[str, str] | None = None,
    factory: Callable[..., Any] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """``resolve`` as a pair: the settings and the problems."""
    resolved = resolve(cluster, index, environ, factory)
    return resolved.values, resolved.problems
