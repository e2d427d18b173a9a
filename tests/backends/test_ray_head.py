"""The Ray head fixture's start (``engines/ray_head.py``) with a stand-in ``ray`` that fails as
Ray does on a loaded machine: it is tried again on fresh ports, and when no attempt starts, the
error names each attempt's reason in Ray's words, not the warning ``ray start`` printed last."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.backends.engines import ray_head
from tests.backends.engines.ray_head import ATTEMPTS, RayHead

FAILING_RAY = """#!{python}
import sys
from pathlib import Path
args = sys.argv[1:]
temp_dir = Path(args[args.index("--temp-dir") + 1])
port = args[args.index("--port") + 1]
with open({calls!r}, "a") as calls:
    calls.write(port + "\\n")
logs = temp_dir / "session_x" / "logs"
logs.mkdir(parents=True)
(temp_dir / "session_latest").symlink_to(logs.parent)
(logs / "raylet.out").write_text(
    "[2026-11-28 04:19:13,100 I 1 1] (raylet) main.cc:1: Starting\\n"
    "[2026-11-28 04:19:43,137 E 1 1] (raylet) node_manager.cc:9: registration with GCS "
    "at port " + port + " timed out\\n"
)
print("Exception: The current node timed out during startup.")
print("2026-11-28 04:19:44,000 WARNING an unrelated warning printed last")
sys.exit(1)
"""


def test_a_head_that_never_starts_is_tried_again_and_each_reason_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls"
    fake = tmp_path / "ray"
    fake.write_text(FAILING_RAY.format(python=sys.executable, calls=str(calls)))
    fake.chmod(0o755)
    monkeypatch.setattr(ray_head, "ray_executable", lambda: fake)
    head = RayHead(start_limit=60)
    with pytest.raises(RuntimeError) as failed:
        head.start()
    ports = calls.read_text().split()
    assert len(ports) == ATTEMPTS and len(set(ports)) == ATTEMPTS  # afresh, on new ports
    message = str(failed.value)
    for attempt, port in enumerate(ports, start=1):
        assert f"attempt {attempt} of {ATTEMPTS}: ray start exited 1" in message
        assert f"registration with GCS at port {port} timed out" in message  # the raylet's E
    assert "The current node timed out during startup" in message
    assert "an unrelated warning" not in message
    assert "Starting" not in message  # the raylet's info lines are not errors
    assert not head.temp_dir.exists()  # nothing left behind
