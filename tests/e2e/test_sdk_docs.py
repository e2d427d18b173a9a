"""Every Python example of docs/sdk.md, run as written, in order, against a real
``flotilla up`` (the examples build on each other as a reader's session would)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.e2e.service import Services
from tests.timing import limit

DOC = Path(__file__).resolve().parents[2] / "docs" / "sdk.md"


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def test_every_sdk_example_runs_against_flotilla_up(services: Services, tmp_path: Path) -> None:
    found = examples()
    assert len(found) >= 8, "docs/sdk.md lost its examples"
    server = services.start(
        db=f"sqlite:///{tmp_path / 'f.db'}",
        state_dir=tmp_path / "runs",
        extra=["--cycle-interval", "0.1"],
    )
    env = {**os.environ, "FLOTILLA_SERVER": server.url}
    env.pop("FLOTILLA_TOKEN", None)  # the token file of this loopback server, as a user's
    outputs = []
    for number, code in enumerate(found, 1):
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=limit(180),
            check=False,
        )
        assert done.returncode == 0, f"example {number} failed:\n{code}\n{done.stderr}"
        outputs.append(done.stdout)
    assert "sdk-hello succeeded 0" in outputs[1]
    assert "stdout hello" in outputs[1] and "stderr warning" in outputs[1]
    assert "no-such-job" in outputs[2]
    assert "step 1\nstep 2\nstep 3\n" in outputs[4] and "running -> succeeded" in outputs[4]
    assert "cancelled" in outputs[5]
