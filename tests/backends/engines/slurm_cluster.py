"""A real one-node Slurm cluster (munged + slurmctld + slurmd) in a private directory.

What ``../shared/ENGINES.md`` measured, as a fixture: every daemon gets its own socket, key,
state, logs and free ports under ``box``, so tests running at the same time never share a
daemon, and ``stop`` ends exactly the processes ``start`` made (by PID). Two fake GPUs are
character devices (Slurm refuses plain files), so ``--gres=gpu:N`` sets CUDA_VISIBLE_DEVICES.
``KillWait`` is Slurm's default (30 s): a shorter grace is the backend's to enforce.

Run it by hand: ``python tests/backends/engines/slurm_cluster.py /tmp/box`` starts one and
prints the ``SLURM_CONF`` to export; Ctrl-C stops it.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REQUIRED = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol")
CPUS = 8
"""More CPUs than the machine has (``config_overrides``): multi-replica tests need slots."""
MEMORY_MIB = 4000
GPUS = 2
NODE_FEATURES = ("fast", "testbox")


def slurm_installed() -> bool:
    return all(shutil.which(program) for program in REQUIRED)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _free_range(width: int) -> int:
    """The first port of ``width`` consecutive ports that are free now."""
    for _ in range(200):
        start = _free_port()
        if start + width >= 65535:
            continue
        ports = range(start, start + width)
        if all(_port_free(port) for port in ports):
            return start
    raise RuntimeError("no range of free ports for srun")


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class SlurmCluster:
    """One controller and one node named after this host; ``conf`` is the SLURM_CONF."""

    box: Path
    cluster_name: str = "testbox"
    kill_wait: int = 30
    host: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.box / "etc" / "slurm.conf"

    @property
    def bin_dir(self) -> str:
        return str(Path(shutil.which("sbatch") or "/usr/bin/sbatch").parent)

    @property
    def node(self) -> str:
        return self.host

    def environment(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self, timeout: float = 30.0) -> None:
        if self.box.exists():
            shutil.rmtree(self.box)
        for name in ("etc", "munge", "spool/ctld", "spool/d", "run", "log", "dev", "out"):
            (self.box / name).mkdir(parents=True)
        (self.box / "munge").chmod(0o755)
        for index in range(GPUS):
            os.mknod(self.box / "dev" / f"fakegpu{index}", 0o600 | 0o020000, os.makedev(1, 3))
        self._write_config()
        key = self.box / "munge" / "munge.key"
        subprocess.run(["mungekey", "-c", "-k", str(key)], check=True, capture_output=True)
        key.chmod(0o600)
        self._spawn(
            [
                "munged",
                "-F",
                "--socket",
                str(self.box / "munge" / "munge.socket"),
                "--key-file",
                str(key),
                "--pid-file",
                str(self.box / "run" / "munged.pid"),
                "--log-file",
                str(self.box / "log" / "munged.log"),
                "--seed-file",
                str(self.box / "munge" / "munge.seed"),
                "--force",
            ],
            "munged",
        )
        self._wait_for(lambda: (self.box / "munge" / "munge.socket").exists(), "munged", 10)
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._spawn(["slurmd", "-D", "-f", str(self.conf)], "slurmd")
        self._wait_for(self._node_idle, "the node to become idle", timeout)

    def restart_controller(self, *, forget_jobs: bool) -> None:
        """Stop slurmctld and start it again; ``forget_jobs`` wipes its saved state first, so
        it knows no job any more (what ``MinJobAge`` does to finished ones, in a second)."""
        controller = next(p for p in self.processes if p.args[0] == "slurmctld")
        controller.send_signal(signal.SIGTERM)
        controller.wait(timeout=20)
        self.processes.remove(controller)
        if forget_jobs:
            shutil.rmtree(self.box / "spool" / "ctld")
            (self.box / "spool" / "ctld").mkdir()
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._wait_for(self._node_idle, "the node to become idle after a restart", 30)

    def _spawn(self, command: list[str], name: str) -> None:
        log = (self.box / "log" / f"{name}.out").open("wb")
        self.processes.append(
            subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=True,
            )
        )
        log.close()

    def _node_idle(self) -> bool:
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(f"{process.args[0]} exited: {self.logs()}")
        result = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%T"],
            capture_output=True,
            text=True,
            env=self.environment(),
            timeout=10,
        )
        return result.returncode == 0 and result.stdout.strip() == "idle"

    def _wait_for(self, ready: object, what: str, timeout: float) -> None:
        assert callable(ready)
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Slurm fixture: timed out waiting for {what}\n{self.logs()}")
            time.sleep(0.2)

    def logs(self) -> str:
        texts = []
        for path in sorted((self.box / "log").glob("*")):
            texts.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(texts)

    def stop(self) -> None:
        """End the daemons this fixture started (by PID), and any job step they left."""
        if any(process.poll() is None for process in self.processes):
            subprocess.run(
                [
                    "scancel",
                    "--signal=KILL",
                    "--full",
                    "--state=RUNNING",
                    f"--user={getpass.getuser()}",
                ],
                env=self.environment(),
                capture_output=True,
                timeout=20,
                check=False,
            )
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()
        for pid in self._leftovers():
            # Job processes outlive slurmd (a slurmstepd, an orphaned srun): end them by PID.
            for child in [*_children(pid), pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)

    def _leftovers(self) -> list[int]:
        """Processes of this cluster's jobs: their environment names this SLURM_CONF."""
        wanted = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if wanted in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def _write_config(self) -> None:
        box, host = self.box, self.host
        ctld, slurmd = _free_port(), _free_port()
        srun = _free_range(40)
        features = ",".join(NODE_FEATURES)
        self.conf.write_text(
            f"""ClusterName={self.cluster_name}
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld}
SlurmdPort={slurmd}
SrunPortRange={srun}-{srun + 39}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={box}/munge/munge.socket
StateSaveLocation={box}/spool/ctld
SlurmdSpoolDir={box}/spool/d
SlurmctldPidFile={box}/run/slurmctld.pid
SlurmdPidFile={box}/run/slurmd.pid
SlurmctldLogFile={box}/log/slurmctld.log
SlurmdLogFile={box}/log/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={box}/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
MinJobAge=300
KillWait={self.kill_wait}
GresTypes=gpu
NodeName={host} NodeAddr=127.0.0.1 CPUs={CPUS} RealMemory={MEMORY_MIB} Gres=gpu:{GPUS} \
Features={features} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
        )
        devices = f"{box}/dev/fakegpu[0-{GPUS - 1}]"
        (self.box / "etc" / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName={host} Name=gpu File={devices}\n"
        )


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc), deepest last."""
    found: list[int] = []
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        for task in tasks:
            for child in (task / "children").read_text().split():
                found += [int(child), *_children(int(child))]
    except OSError:
        pass
    return found


def main() -> None:
    box = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/flotilla-slurm-box")
    cluster = SlurmCluster(box)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    cluster.start()
    print(f"export SLURM_CONF={cluster.conf}", flush=True)
    try:
        signal.pause()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
