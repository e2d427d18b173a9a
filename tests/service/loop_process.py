"""A scheduler replica as its own process, for crash tests: ``python loop_process.py URL DIR``.

It runs the scheduling loop with the local backend until killed.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from flotilla.app import ServiceConfig, build_service
from flotilla.backends.local.backend import LocalBackend
from flotilla.service.loop import LoopSettings


def main(url: str, state_dir: str, replica: str) -> None:
    backend = LocalBackend(cluster="local", state_dir=Path(state_dir), grace_period=1.0)
    settings = LoopSettings(cycle_interval=0.05, lease_ttl=1.5, replica=replica)
    config = ServiceConfig(db=url, loop=settings)
    # The cluster is the test's to record: this replica only drives it.
    service = build_service(config, backends={"local": backend}, register_clusters=False)
    print("ready", flush=True)
    service.loop.run(threading.Event())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
