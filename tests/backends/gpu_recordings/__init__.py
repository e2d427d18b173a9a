"""Recorded GPU machines for tests without a GPU: what ``nvidia-smi -q -x`` (``NAME.xml``) and
``nvidia-smi topo -m`` (``NAME.topo``) print there, read back by ``RecordedSource``.

``h200-1``: one NVIDIA H200 (143771 MiB) with one process holding 60 GiB. ``a100-8-nvlink``:
eight NVIDIA A100-SXM4-80GB joined by NVLink (NV12, NVSwitch), GPUs 0-3 on NUMA node 0 and
4-7 on node 1, three processes on devices 0 and 1. They are written in the element names,
units and layout those commands print (nvsmi_device_v12), trimmed to the fields read; they
were not captured on those machines, and ``scripts/gpu-check`` is what checks a real one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flotilla.backends.local.gpu_sources import GpuDevice, GpuProcess, RecordedSource

HERE = Path(__file__).parent


def recorded(name: str) -> RecordedSource:
    topology = HERE / f"{name}.topo"
    return RecordedSource(
        (HERE / f"{name}.xml").read_text(), topology.read_text() if topology.exists() else ""
    )


@dataclass(frozen=True)
class JobOnRecordedGpu:
    """The recorded H200 (``h200-1``), its one recorded process (60 GiB, 97 % busy) being
    whatever pid the job wrote to ``pid_file`` (``writes_its_pid``): a GPU source that
    reports a test's job as the device's user."""

    pid_file: Path

    def devices(self) -> Sequence[GpuDevice]:
        return recorded("h200-1").devices()

    def processes(self) -> Sequence[GpuProcess]:
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            return []
        [process] = recorded("h200-1").processes()
        return [GpuProcess(process.device, pid, process.memory_used)]


def writes_its_pid(pid_file: Path, then: str) -> str:
    """Shell: write this shell's pid to ``pid_file`` at once (renamed into place, so a reader
    never sees half of it), then run ``then``."""
    return f"echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file} && {then}"
