"""``scripts/gpu-check --wheelhouse DIR`` on a machine without network or driver: with a fake
``nvidia-smi`` saying there is a GPU, it installs the project and its locked dependencies from
the wheelhouse alone, and fails on the missing driver only, saying so, well within 3 minutes.

The wheelhouse is the project's wheel (``uv build --offline``) and each locked runtime
dependency repacked as a wheel from this test environment (no network here); on a networked
machine ``scripts/gpu-wheelhouse`` downloads the same wheels from the index, with hashes."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import time
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE_SMI = """#!/bin/sh
# nvidia-smi, faked: one H100 listed; no driver behind it.
case "$*" in
  *-L*) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-9d1f3e2a-6b4c-4a8e-b1d7-3c5e9f0a2b64)" ;;
  *query-gpu=name*) echo "NVIDIA H100 80GB HBM3" ;;
  *) echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." ;;
esac
"""


def _hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def repack(name: str, into: Path) -> str:
    """The installed distribution ``name`` as a wheel in ``into`` (its files under
    site-packages, its dist-info with a new RECORD); returns its pinned requirement."""
    dist = metadata.distribution(name)
    wheel_info = dist.read_text("WHEEL") or ""
    tags = [
        line.split(":", 1)[1].strip().split("-")
        for line in wheel_info.splitlines()
        if line.startswith("Tag:")
    ]
    tag = "-".join(".".join(dict.fromkeys(part[i] for part in tags)) for i in range(3))
    info_dir = next(
        str(f).split("/")[0]
        for f in dist.files or ()
        if str(f).split("/")[0].endswith(".dist-info")
    )
    stem = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    target = into / f"{stem}-{dist.version}-{tag}.whl"
    record = io.StringIO()
    rows = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as wheel:
        for file in dist.files or ():
            path = str(file)
            if path.startswith("..") or "__pycache__" in path or path.startswith("/"):
                continue
            if path.endswith((".dist-info/RECORD", "INSTALLER", "REQUESTED", "direct_url.json")):
                continue
            source = Path(str(dist.locate_file(file)))
            if not source.is_file():
                continue
            data = source.read_bytes()
            wheel.writestr(path, data)
            rows.writerow([path, _hash(data), len(data)])
        rows.writerow([f"{info_dir}/RECORD", "", ""])
        wheel.writestr(f"{info_dir}/RECORD", record.getvalue())
    return f"{dist.metadata['Name']}=={dist.version}"


def _python_with_uv() -> str:
    """The machine's own ``python3`` (where ``scripts/_env.sh`` installs uv), not the
    project's venv first on ``PATH`` under ``uv run`` (``./scripts/test``), which has no uv."""
    outside = os.pathsep.join(
        entry
        for entry in os.environ.get("PATH", "").split(os.pathsep)
        if not Path(entry).resolve().is_relative_to((REPO / ".venv").resolve())
    )
    found = shutil.which("python3", path=outside)
    assert found is not None, "no python3 outside the project's venv on PATH"
    return found


UV = [_python_with_uv(), "-m", "uv"]


def wheelhouse(into: Path) -> None:
    into.mkdir()
    subprocess.run(
        [*UV, "build", "--wheel", "--offline", "--quiet", "-o", str(into)],
        cwd=REPO,
        check=True,
    )
    locked = subprocess.run(
        [
            *UV,
            "export",
            "--frozen",
            "--no-dev",
            "--no-emit-project",
            "--no-hashes",
            "--format",
            "requirements-txt",
            "--quiet",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    pinned = []
    for line in locked.splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==", line)
        if match is None:
            continue
        try:
            pinned.append(repack(match.group(1), into))
        except metadata.PackageNotFoundError:
            continue  # locked for another platform (its marker excludes this one)
    (into / "requirements.txt").write_text("\n".join(pinned) + "\n")


@pytest.mark.slow
def test_gpu_check_installs_from_a_wheelhouse_and_fails_only_on_the_missing_driver(
    tmp_path: Path,
) -> None:
    house = tmp_path / "wheelhouse"
    wheelhouse(house)
    assert any(path.name.startswith("nvidia_ml_py-") for path in house.iterdir())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PIP_INDEX_URL": "http://127.0.0.1:9/nowhere",  # any index use fails
        "PIP_CACHE_DIR": str(tmp_path / "pip-cache"),
    }
    started = time.monotonic()
    done = subprocess.run(
        [str(REPO / "scripts/gpu-check"), "--wheelhouse", str(house)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.monotonic() - started
    lines = done.stdout.splitlines()
    assert done.returncode == 1, done.stdout + done.stderr
    assert lines[0] == f"PASS  install: from {house}, no network", done.stdout + done.stderr
    assert lines[1].startswith("FAIL  driver: NVML did not start: "), done.stdout
    assert [line for line in lines if line.startswith("FAIL")] == [lines[1]]
    assert lines[-1] == "gpu-check: some checks failed"
    assert took < 180, f"took {took:.0f}s"
