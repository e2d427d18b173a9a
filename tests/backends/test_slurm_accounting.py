"""A Slurm run's CPU time and peak memory (``flotilla sacct``) from Slurm's accounting:
``sacct``'s ``TotalCPU`` and ``MaxRSS`` read as numbers, and a cluster that keeps no
accounting giving none rather than an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from flotilla.backends.slurm.accounting import parse_accounting, parse_duration, parse_size
from flotilla.backends.slurm.commands import SlurmClients
from flotilla.model.run_resources import RunResources

KIB, MIB, GIB = 2**10, 2**20, 2**30


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("00:02.345", 2.345),
        ("01:02.5", 62.5),
        ("12:34", 754.0),
        ("1:00:00", 3600.0),
        ("01:02:03.250", 3723.25),
        ("2-03:00:00", 2 * 86400 + 3 * 3600.0),
        ("1-00:00:01.5", 86401.5),
        ("", None),
        ("INVALID", None),
    ],
)
def test_totalcpu_is_read_as_seconds(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == (None if seconds is None else pytest.approx(seconds))


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("53248K", 53248 * KIB),
        ("2.5G", round(2.5 * GIB)),
        ("512M", 512 * MIB),
        ("1T", 2**40),
        ("0", 0),
        ("4096", 4096),
        ("", None),
        ("lots", None),
    ],
)
def test_maxrss_is_read_as_bytes(text: str, size: int | None) -> None:
    assert parse_size(text) == size


SACCT = """\
41|01:00:02.345|
41.batch|00:02.300|53248K
41.extern|00:00.001|1024K
41.0|01:00:00|2.5G
42|00:00:00|
42.batch||
43_7|00:10.000|
43_7.batch|00:10.000|100M
"""


def test_a_job_is_its_totalcpu_and_the_largest_maxrss_of_its_steps() -> None:
    figures = parse_accounting(SACCT)
    assert figures[41] == RunResources(cpu_seconds=3602.345, memory_peak=round(2.5 * GIB))
    assert figures[42] == RunResources(cpu_seconds=0.0, memory_peak=None)  # no step measured
    assert figures[43] == RunResources(cpu_seconds=10.0, memory_peak=100 * MIB)  # array element


def test_steps_summed_when_the_job_line_has_no_totalcpu() -> None:
    figures = parse_accounting("50||\n50.batch|00:01.500|10M\n50.0|00:02.500|30M\n")
    assert figures[50] == RunResources(cpu_seconds=4.0, memory_peak=30 * MIB)


def fake_sacct(tmp_path: Path, body: str) -> SlurmClients:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sacct = bin_dir / "sacct"
    sacct.write_text(f"#!/bin/sh\n{body}\n")
    sacct.chmod(0o755)
    return SlurmClients(None, str(bin_dir), timeout=10.0)


def test_the_client_asks_sacct_for_the_jobs_that_ended(tmp_path: Path) -> None:
    clients = fake_sacct(tmp_path, f'echo "$@" > {tmp_path}/args\ncat <<"END"\n{SACCT}END')
    figures = clients.accounting([42, 41])
    assert figures[41].memory_peak == round(2.5 * GIB)
    asked = (tmp_path / "args").read_text().split()
    assert asked[:2] == ["-j", "41,42"] and "JobID,TotalCPU,MaxRSS" in asked


def test_a_cluster_without_accounting_gives_no_figures_not_an_error(tmp_path: Path) -> None:
    """``AccountingStorageType=accounting_storage/none`` (the test cluster's): sacct -j fails;
    the runs' figures stay null (``-``)."""
    clients = fake_sacct(
        tmp_path, 'echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1'
    )
    assert clients.accounting([41]) == {}
