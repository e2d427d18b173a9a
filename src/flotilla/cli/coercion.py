"""Option and argument values converted without pydantic, when the value is a plain one.

Typer 0.29 converts every parameter's value through a pydantic ``TypeAdapter`` built on its
first use (``typer._coercion.build_runtime_param``): any command that runs, not ``--help``,
imports typer's adapters and pydantic and builds an adapter per parameter before Flotilla
runs a line (docs/performance.md, CLI start-up). The parameters of Flotilla's commands are
all of a few kinds: ``str``, ``bool``, ``int`` and ``float`` (with ``min``/``max``), ``Path``,
an ``Enum``, and lists of those. ``install`` has typer build, for those kinds, a converter
that takes the common values directly, the value typer's adapter would return (``"5"`` for
an ``int`` is ``5``; a choice through typer's own ``coerce_cli_choice``; a ``Path`` through
its ``coerce_cli_path``), and hands every other value — an invalid one, one out of range,
``" 5"`` or ``"1e3"`` — to typer's own pydantic adapter, built then, so that what is accepted
and every error message stay typer's. Any other kind of parameter is typer's as before.
``tests/cli/test_start_up.py`` compares the two on many values.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args, get_origin

if TYPE_CHECKING:
    from typer._click import Context
    from typer._coercion import RuntimeParam, TypeDescriptor
    from typer.core import _TyperParameter
    from typer.models import ParameterInfo

SLOW: Any = object()
"""What a quick conversion returns for a value it leaves to typer's adapter."""

Quick = Callable[[Any, "_TyperParameter", "Context"], Any]

INTEGER = re.compile(r"-?[0-9]{1,18}")
DECIMAL = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,15})?")


def _in_range(number: float, info: ParameterInfo) -> bool:
    low, high = info.min, info.max
    return (low is None or number >= low) and (high is None or number <= high)


def _leaf(annotation: Any, info: ParameterInfo) -> Quick | None:
    """The quick conversion of one value of ``annotation``, or None for typer's alone."""
    from typer._param_types import coerce_cli_choice, coerce_cli_path, routes_to_path

    if info.parser is not None or info.clamp:
        return None
    if annotation is str:
        return lambda value, _param, _ctx: value if isinstance(value, str) else SLOW
    if annotation is bool:
        return lambda value, _param, _ctx: value if isinstance(value, bool) else SLOW
    if annotation is int:

        def integer(value: Any, _param: _TyperParameter, _ctx: Context) -> Any:
            if isinstance(value, str) and INTEGER.fullmatch(value):
                value = int(value)
            elif type(value) is not int:
                return SLOW
            return value if _in_range(value, info) else SLOW

        return integer
    if annotation is float:

        def decimal(value: Any, _param: _TyperParameter, _ctx: Context) -> Any:
            plain = isinstance(value, str) and DECIMAL.fullmatch(value)
            if plain or type(value) in (int, float):
                value = float(value)
            else:
                return SLOW
            return value if _in_range(value, info) else SLOW

        return decimal
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        choices = tuple(annotation)

        def choice(value: Any, _param: _TyperParameter, ctx: Context) -> Any:
            try:
                return coerce_cli_choice(
                    value, choices=choices, case_sensitive=info.case_sensitive, ctx=ctx
                )
            except ValueError:
                return SLOW

        return choice
    if (
        isinstance(annotation, type)
        and issubclass(annotation, Path)
        and routes_to_path(annotation, info)
        and info.path_type is None
    ):

        def path(value: Any, param: _TyperParameter, ctx: Context) -> Any:
            if isinstance(value, str) and value:
                value = annotation(value)
            elif not isinstance(value, annotation):
                return SLOW
            try:
                return coerce_cli_path(value, info, path_type=annotation, param=param, ctx=ctx)
            except Exception:  # typer's adapter says why, in its words
                return SLOW

        return path
    return None


def quick_conversion(annotation: Any, info: ParameterInfo) -> Quick | None:
    """A parameter's quick conversion: of one value, or of each of a list's."""
    if get_origin(annotation) is not list:
        return _leaf(annotation, info)
    (item,) = get_args(annotation)
    each = _leaf(item, info)
    if each is None:
        return None

    def listed(value: Any, param: _TyperParameter, ctx: Context) -> Any:
        found = [
            each(one, param, ctx) for one in (value if isinstance(value, list | tuple) else [value])
        ]
        return SLOW if any(one is SLOW for one in found) else found

    return listed


def install() -> None:
    """Have typer build the quick conversion of each parameter it can have one for."""
    import typer.core

    found = getattr(typer.core, "build_runtime_param", None)
    if found is None or getattr(found, "quick", False):
        return  # another typer than the one this was written for, or installed already
    from typer import _coercion

    typed: Callable[[TypeDescriptor], RuntimeParam] = found

    @dataclass(frozen=True)
    class QuickRuntimeParam(_coercion.RuntimeParam):
        """A parameter's conversion: its quick one, else typer's (built on first need)."""

        descriptor: TypeDescriptor = field(compare=False)
        quick: Quick = field(compare=False)
        slow: list[RuntimeParam] = field(default_factory=list, compare=False)

        def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Context) -> Any:
            found = self.quick(value, param, ctx)
            if found is not SLOW:
                return found
            if not self.slow:
                self.slow.append(typed(self.descriptor))
            return self.slow[0]._coerce_value(value, param=param, ctx=ctx)

    def build_runtime_param(descriptor: TypeDescriptor) -> RuntimeParam:
        quick = None
        if descriptor.file_annotation is None:
            quick = quick_conversion(descriptor.annotation, descriptor.parameter_info)
        if quick is None:
            return typed(descriptor)
        return QuickRuntimeParam(
            parameter_info=descriptor.parameter_info,
            annotation=descriptor.annotation,
            descriptor=descriptor,
            quick=quick,
        )

    build_runtime_param.quick = True  # type: ignore[attr-defined]
    setattr(typer.core, "build_runtime_param", build_runtime_param)  # noqa: B010 - private
