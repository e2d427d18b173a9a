"""Kubernetes quantities: cpu in cores, memory in bytes, counts for everything else."""

from __future__ import annotations

import math

import pytest

from flotilla.model import format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (2, 2.0),
        (0.5, 0.5),
        ("0.5", 0.5),
        ("500m", 0.5),
        ("1", 1.0),
        ("1k", 1e3),
        ("1M", 1e6),
        ("1G", 1e9),
        ("1Ki", 1024.0),
        ("4Gi", 4 * 2**30),
        ("1.5Gi", 1.5 * 2**30),
        ("512Mi", 512 * 2**20),
        ("1Ti", 2**40),
        ("1e3", 1000.0),
        ("100n", 100e-9),
        (".5", 0.5),
        (" 2 ", 2.0),
        ("0", 0.0),
    ],
)
def test_quantities_parse_to_base_units(text: object, value: float) -> None:
    assert math.isclose(parse_quantity(text), value)


def test_binary_and_decimal_suffixes_differ() -> None:
    assert parse_quantity("1Gi") == 2**30
    assert parse_quantity("1G") == 10**9


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-1", "must be >= 0"),
        (-0.5, "must be >= 0"),
        ("4GB", "is not a quantity"),
        ("Gi", "is not a quantity"),
        ("1 Gi", "is not a quantity"),
        ("", "is not a quantity"),
        (True, "not True"),
        (None, "not NoneType"),
        ([1], "not list"),
        (float("inf"), "must be finite"),
        ("1e400", "must be finite"),
    ],
)
def test_invalid_quantities_are_rejected_with_the_reason(text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("name", "value", "text"),
    [
        ("memory", 64 * 2**30, "64Gi"),
        ("memory", 1.5 * 2**30, "1.5Gi"),
        ("memory", 512 * 2**20, "512Mi"),
        ("memory", 100.0, "100"),
        ("gpu_memory", 80 * 2**30, "80Gi"),
        ("cpu", 0.5, "0.5"),
        ("cpu", 8.0, "8"),
        ("gpu", 0.25, "0.25"),
        ("cpu", 1 / 3, "0.333"),
    ],
)
def test_quantities_are_shown_as_people_write_them(name: str, value: float, text: str) -> None:
    assert format_quantity(name, value) == text
