"""``gpu_sharing: mps`` on the local backend: jobs run as clients of an NVIDIA MPS control
daemon, each limited to its share of a device.

The backend starts one control daemon for the node's GPUs (``nvidia-cuda-mps-control -d``,
the usual deployment: one daemon serves every device it sees), with its pipe and log
directories under the backend's state dir, unless one already answers there (a restarted
backend keeps the daemon its running jobs use). Every replica that holds a fraction of a GPU
gets, set after the job's own environment so that it cannot raise them:

- ``CUDA_MPS_PIPE_DIRECTORY``: the daemon's pipe directory;
- ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``: ``0=<MiB>M``, its ``gpu_memory`` (else its ``gpu``
  fraction of the device's memory); device 0 is the one device ``CUDA_VISIBLE_DEVICES``
  shows it;
- ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``: its ``gpu`` fraction × 100 of the device's SMs.

A whole-GPU replica gets only the pipe directory (no limit). What real MPS needs beyond
this (a Volta or newer GPU, the device in ``EXCLUSIVE_PROCESS`` compute mode for isolation,
clients running as the daemon's user) is in ``docs/backends.md``; nothing here ran on a GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from flotilla.backends.interface import DispatchRequest, ReplicaPlacement
from flotilla.backends.local.gpu_sources import GpuUnavailable

CONTROL = "nvidia-cuda-mps-control"
PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
MEMORY_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MIB = 2**20


@dataclass(frozen=True)
class MpsDaemon:
    """Where the node's control daemon listens: ``directory/pipe`` and logs in ``directory/log``."""

    directory: Path

    @property
    def pipe(self) -> Path:
        return self.directory / "pipe"

    def _env(self, devices: str) -> dict[str, str]:
        return {
            **os.environ,
            PIPE_ENV: str(self.pipe),
            LOG_ENV: str(self.directory / "log"),
            "CUDA_VISIBLE_DEVICES": devices,
        }

    def start(self, device_count: int) -> str:
        """Start the daemon for devices ``0..device_count-1`` unless one answers here already;
        one line saying which. Raises ``GpuUnavailable`` when the command is missing or fails."""
        if shutil.which(CONTROL) is None:
            raise GpuUnavailable(f"gpu_sharing mps: {CONTROL} is not on PATH")
        if (self.pipe / "control").exists():
            return f"MPS: the control daemon in {self.directory} is running already"
        for directory in (self.pipe, self.directory / "log"):
            directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        devices = ",".join(str(index) for index in range(device_count))
        done = subprocess.run(
            [CONTROL, "-d"], env=self._env(devices), capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip() or f"exit {done.returncode}"
            raise GpuUnavailable(f"gpu_sharing mps: {CONTROL} -d failed: {why}")
        return f"MPS: control daemon started for GPUs {devices} ({self.directory})"

    def stop(self) -> None:
        """Ask the daemon to quit (it ends its servers once their clients are gone)."""
        if shutil.which(CONTROL) is None:
            return
        subprocess.run(
            [CONTROL],
            input="quit\n",
            env=self._env(""),
            capture_output=True,
            text=True,
            check=False,
        )


def client_env(
    daemon: MpsDaemon,
    request: DispatchRequest,
    placement: ReplicaPlacement,
    device_memory: Mapping[int, int],
) -> dict[str, str]:
    """The MPS variables of one replica (see the module); ``device_memory``: bytes per device."""
    if not placement.gpu_ids:
        return {}
    env = {PIPE_ENV: str(daemon.pipe)}
    asked = request.resources.get(placement.task, {})
    gpu = float(asked.get("gpu", 1.0) or 0.0)
    if not 0 < gpu < 1:
        return env
    [device] = placement.gpu_ids[:1]
    memory = asked.get("gpu_memory") or gpu * device_memory.get(device, 0)
    if memory:
        env[MEMORY_ENV] = f"0={max(1, int(memory // MIB))}M"
    env[THREADS_ENV] = str(max(1, round(gpu * 100)))
    return env
