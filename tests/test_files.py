"""``flotilla.files``: atomic replace for regular files only; devices, FIFOs and links survive.

The bug this guards against: ``flotilla simulate … -o /dev/null`` run as root renamed a
temporary file over ``/dev/null`` and left the machine without its null device.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from flotilla.backends.common import write_json_atomic
from flotilla.files import write_text_safely
from tests.special_files import character_device_copy_of_null, fifo_reader


def test_a_regular_file_is_replaced_whole_and_keeps_its_permissions(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_text("old")
    target.chmod(0o600)
    write_text_safely(target, "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [path.name for path in tmp_path.iterdir()] == ["report.json"]  # no temporary left


def test_a_missing_file_is_created_with_its_directories(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "report.json"
    write_text_safely(target, "x")
    assert target.read_text() == "x"


def test_a_fifo_is_written_into_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with fifo_reader(fifo) as received:
        write_text_safely(fifo, "through the pipe")
    assert received() == b"through the pipe"
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_backend_records_never_replace_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    with fifo_reader(fifo) as received:
        write_json_atomic(fifo, {"state": "running"})
    assert b'"running"' in received()
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_character_device_stays_a_character_device(tmp_path: Path) -> None:
    null = character_device_copy_of_null(tmp_path)
    write_text_safely(null, "discarded")
    assert stat.S_ISCHR(null.stat().st_mode)


def test_a_directory_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError, match=str(tmp_path)):
        write_text_safely(tmp_path, "x")


def test_a_symlink_stays_a_link_and_its_file_is_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text_safely(link, "new")
    assert link.is_symlink()
    assert real.read_text() == "new"


def test_concurrent_readers_see_old_or_new_never_half(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    old, new = "a" * 200_000, "b" * 200_000
    target.write_text(old)
    seen: set[str] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.add(target.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    for index in range(20):
        write_text_safely(target, new if index % 2 == 0 else old, durable=False)
    stop.set()
    reader.join()
    assert seen <= {old, new}
