"""What the backend tests share: harnesses that make backends and let time pass.

A ``Harness`` hides the only things that differ between backends in the contract tests: how
to make one, and how to let time pass (real sleeps in short bounded loops for ``local``, a
``FakeClock`` for ``sim``). The payloads are shared: ``local`` runs ``command`` and ignores
``sim``; ``sim`` follows ``sim`` and checks ``command`` like a real backend would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

import pytest

from flotilla.backends import (
    Backend,
    BackendRunState,
    CancelRequest,
    DispatchRequest,
    LogsRequest,
    LogStream,
    ReplicaPlacement,
    RunStatus,
    StatusRequest,
)
from flotilla.backends.local.backend import LocalBackend
from flotilla.backends.local.processes import group_alive
from flotilla.backends.sim import FakeClock, SimBackend
from flotilla.backends.slurm import SlurmBackend
from tests.timing import deadline, wait_until

from .engines.slurm_cluster import SlurmCluster

WAIT_LIMIT = 15.0
"""Upper bound of any wait, in seconds on the reference machine (``tests/timing.py`` stretches
it on a slower or busier one); reaching it fails the test, it never passes it."""


class Harness:
    name = "base"
    wait_limit = WAIT_LIMIT
    error_stream = LogStream.STDERR
    """Where a command's standard error is read (one log of both streams: stdout)."""
    starts_cancelled_pending_runs = False
    """The engine may still start a run cancelled while it waited (Ray: ``stop_job`` leaves a
    ``PENDING`` job waiting); the backend then stops it at once."""

    def __init__(self, state_dir: Path, scratch: Path) -> None:
        self.state_dir = state_dir
        self.scratch = scratch
        self.backends: list[Backend] = []
        self._gates = 0

    # --- making backends ---

    def make(self, **config: Any) -> Backend:
        """A backend with this harness's settings, ``config`` on top; closed by ``close_all``."""
        backend = self.construct({**self.settings(), **config})
        self.backends.append(backend)
        return backend

    def settings(self) -> dict[str, Any]:
        raise NotImplementedError

    def construct(self, settings: dict[str, Any]) -> Backend:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *error: object) -> None:
        self.close_all()

    def close_leaving_runs(self, backend: Backend) -> None:
        """Close like a service that stops (or dies) with runs still going."""
        backend.close()

    def close_all(self) -> None:
        for backend in reversed(self.backends):
            backend.close()

    # --- time ---

    def pass_time(self) -> None:
        raise NotImplementedError

    def wait(
        self, backend: Backend, run_id: str, until: Callable[[RunStatus], bool], what: str
    ) -> RunStatus:
        due = deadline(self.wait_limit)
        while True:
            status = backend.status(StatusRequest(run_id))
            if until(status):
                return status
            if due.expired():
                raise AssertionError(
                    f"run {run_id} never became {what} in {due.allowed:.0f}s: {status}"
                )
            self.pass_time()

    def wait_terminal(self, backend: Backend, run_id: str) -> RunStatus:
        return self.wait(backend, run_id, lambda status: status.state.terminal, "terminal")

    def wait_output(self, backend: Backend, run_id: str, text: str) -> None:
        """Until the run's stdout contains ``text`` (e.g. a process says it is ready)."""
        due = deadline(self.wait_limit)
        while text not in read_all(backend, run_id):
            if due.expired():
                raise AssertionError(f"run {run_id} never printed {text!r} in {due.allowed:.0f}s")
            self.pass_time()

    # --- payloads shared by every backend ---

    def gated(self, output: str = "hello", exit_code: int = 0) -> tuple[dict[str, Any], Path]:
        """A run that stays running until its gate file exists, then prints and exits."""
        self._gates += 1
        gate = self.scratch / f"gate-{self._gates}"
        script = (
            f"while [ ! -e '{gate}' ]; do sleep 0.01; done; "
            f"echo {output}; echo done >&2; exit {exit_code}"
        )
        payload = {
            "command": script,
            "sim": {"duration": 1.0, "output": [output], "exit_code": exit_code},
        }
        return payload, gate

    def release(self, gate: Path) -> None:
        gate.touch()

    @staticmethod
    def quick(output: str = "hello", exit_code: int = 0) -> dict[str, Any]:
        return {
            "command": f"echo {output}; echo finishing >&2; exit {exit_code}",
            "sim": {"duration": 0.3, "output": [output], "exit_code": exit_code},
        }

    @staticmethod
    def long() -> dict[str, Any]:
        """Runs until stopped (SIGTERM ends it at once)."""
        return {"command": ["sleep", "60"], "sim": {"duration": 60.0}}

    @contextlib.contextmanager
    def held_start(self, backend: Backend) -> Iterator[None]:
        """Runs dispatched in the block stay pending: here a first run takes every CPU of the
        node, as on an engine that reserves them (Ray, Slurm), and is stopped at the end."""
        node = backend.inventory().nodes[0]
        cpus = node.capacity["cpu"]
        backend.dispatch(
            request(
                backend,
                "blocker",
                self.long(),
                job="job-blocker",
                resources={"main": {"cpu": cpus}},
            )
        )
        self.wait(backend, "blocker", lambda s: s.state is BackendRunState.RUNNING, "running")
        try:
            yield
        finally:
            backend.cancel(CancelRequest("blocker"))
            self.wait_terminal(backend, "blocker")

    def assert_gone(self, status: RunStatus) -> None:
        """Nothing of the run is left executing."""


class LocalHarness(Harness):
    name = "local"

    @contextlib.contextmanager
    def held_start(self, backend: Backend) -> Iterator[None]:
        """The local engine reserves nothing and runs a run's commands once its supervisors
        are up: no pending phase beyond its start gate, which a cancel closes (the run ends
        with no start: ``local/test_local.py``, a cancel during a large start)."""
        pytest.skip("the local engine has no pending phase to cancel in (see its start gate)")
        yield

    def settings(self) -> dict[str, Any]:
        return {
            "state_dir": self.state_dir,
            "grace_period": 2.0,
            "stop_runs_on_close": True,
            "monitor_interval": 0.02,
            "working_dir": self.scratch,
        }

    def construct(self, settings: dict[str, Any]) -> Backend:
        return LocalBackend(**settings)

    def close_leaving_runs(self, backend: Backend) -> None:
        assert isinstance(backend, LocalBackend)
        backend.stop_runs_on_close = False
        backend.close()

    def close_all(self) -> None:
        super().close_all()
        # Safety net: a test that failed half-way must still leave no process behind.
        for record in self.state_dir.glob("runs/*/run.json"):
            text = record.read_text()
            for token in text.split('"pid": ')[1:]:
                pid = token.split(",")[0].strip()
                if pid.isdigit() and group_alive(int(pid)):
                    os.killpg(int(pid), signal.SIGKILL)

    def pass_time(self) -> None:
        time.sleep(0.02)

    def assert_gone(self, status: RunStatus) -> None:
        for replica in status.replicas:
            if replica.process_id is None:  # stopped before its command was started
                assert replica.state.terminal
                continue
            assert not group_alive(replica.process_id), f"{replica} still has processes"


class SimHarness(Harness):
    name = "sim"

    @contextlib.contextmanager
    def held_start(self, backend: Backend) -> Iterator[None]:
        """The sim backend holds a run pending for its ``startup_delay`` (virtual time)."""
        assert isinstance(backend, SimBackend)
        before, backend.startup_delay = backend.startup_delay, 3600.0
        try:
            yield
        finally:
            backend.startup_delay = before

    def __init__(self, state_dir: Path, scratch: Path) -> None:
        super().__init__(state_dir, scratch)
        self.clock = FakeClock()

    def settings(self) -> dict[str, Any]:
        return {
            "state_dir": self.state_dir,
            "grace_period": 2.0,
            "clock": self.clock,
        }

    def construct(self, settings: dict[str, Any]) -> Backend:
        return SimBackend(**settings)

    def pass_time(self) -> None:
        self.clock.advance(0.1)


REAL_KUBECONFIG_ENV = "FLOTILLA_TEST_KUBECONFIG"
"""Set to a kubeconfig path to run the kubernetes tests against that real cluster instead of
the fake API server (see docs/backends.md, "Testing against a real cluster")."""
REAL_IMAGE_ENV = "FLOTILLA_TEST_KUBE_IMAGE"


class KubernetesHarness(Harness):
    """The kubernetes backend over the fake API server (tests/backends/engines), or over a real
    cluster when ``FLOTILLA_TEST_KUBECONFIG`` names a kubeconfig.

    On the fake, pods run as local processes, so a gate is a local file as for ``local``. On a
    real cluster pods cannot see the test's files: a gated run then simply sleeps a few seconds
    before it prints and exits, and ``release`` does nothing.
    """

    name = "kubernetes"
    error_stream = LogStream.STDOUT  # a container log holds both streams

    def __init__(self, state_dir: Path, scratch: Path) -> None:
        from .engines.fake_kube_apiserver import FakeApiServer

        super().__init__(state_dir, scratch)
        real = os.environ.get(REAL_KUBECONFIG_ENV)
        self.cluster_name = f"test-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
        self.fake: FakeApiServer | None = None
        if real:
            self.kubeconfig = Path(real)
            self.image = os.environ.get(REAL_IMAGE_ENV, "busybox:1.36")
        else:
            self.fake = FakeApiServer()
            self.fake.cluster.add_node("node-a", cpu="8", memory="32Gi", gpus=2)
            self.fake.cluster.add_node("node-b", cpu="4", memory="16Gi")
            self.kubeconfig = self.fake.kubeconfig(scratch / "kubeconfig")
            self.image = "registry.example/unused:1"

    def settings(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster_name,
            "kubeconfig": self.kubeconfig,
            "grace_period": 2.0,
            "default_image": self.image,
            "watch_timeout": 5,
            "request_timeout": 5.0,
        }

    def construct(self, settings: dict[str, Any]) -> Backend:
        from flotilla.backends.kubernetes import KubernetesBackend  # slow import: only here

        return KubernetesBackend(**settings)

    def gated(self, output: str = "hello", exit_code: int = 0) -> tuple[dict[str, Any], Path]:
        if self.fake is not None:
            return super().gated(output, exit_code)
        script = f"sleep 5; echo {output}; echo done >&2; exit {exit_code}"
        return {"command": script}, self.scratch / "unused-gate"

    def release(self, gate: Path) -> None:
        if self.fake is not None:
            gate.touch()

    def close_all(self) -> None:
        super().close_all()
        if self.fake is not None:
            self.fake.close()
            return
        from flotilla.backends.kubernetes import KubernetesBackend

        cleaner = KubernetesBackend(cluster=self.cluster_name, kubeconfig=self.kubeconfig)
        try:
            for job in cleaner.api.list_jobs(cleaner._selector)["items"]:
                cleaner.api.delete_job(job["metadata"]["name"], "Background")
        finally:
            cleaner.close()

    def pass_time(self) -> None:
        time.sleep(0.02)

    @contextlib.contextmanager
    def held_start(self, backend: Backend) -> Iterator[None]:
        """The fake's kubelet starts no pod in the block: they stay ``Pending``, as pods do
        that wait for an image or a volume. (On a real cluster: a pod pinned to a node
        that does not exist stays pending too; not built, the fake only.)"""
        if self.fake is None:
            pytest.skip("a run held pending is only built on the fake API server")
        self.fake.cluster.run_processes = False
        try:
            yield
        finally:
            self.fake.cluster.run_processes = True

    def assert_gone(self, status: RunStatus) -> None:
        """No pod of the run is left (on the fake: and no process of it runs)."""
        from flotilla.backends.kubernetes import KubernetesBackend
        from flotilla.backends.kubernetes.manifests import JOB_NAME_LABEL, job_name

        assert isinstance(self.backends[-1], KubernetesBackend)
        api = self.backends[-1].api

        wait_until(
            lambda: not api.list_pods(f"{JOB_NAME_LABEL}={job_name(status.run_id)}")["items"],
            f"the pods of {status.run_id} to go",
            WAIT_LIMIT,
            interval=0.05,
        )
        if self.fake is not None:
            with self.fake.cluster.lock:
                for process in self.fake.cluster.processes.values():
                    if job_name(status.run_id) in process.log.name:
                        assert process.popen.poll() is not None, "a pod's process still runs"


class SlurmHarness(Harness):
    """A real Slurm (the session's ``slurm_cluster``); each test is its own Flotilla cluster,
    so run ids repeat across tests without meeting each other's jobs."""

    name = "slurm"

    def __init__(self, state_dir: Path, scratch: Path, cluster: SlurmCluster) -> None:
        super().__init__(state_dir, scratch)
        self.slurm = cluster
        self.cluster_name = f"slurm-{uuid.uuid4().hex[:8]}"

    def settings(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster_name,
            "slurm_conf": self.slurm.conf,
            "output_dir": self.state_dir / "output",
            "working_dir": self.scratch,
            "grace_period": 2.0,
            "monitor_interval": 0.1,
        }

    def construct(self, settings: dict[str, Any]) -> Backend:
        return SlurmBackend(**settings)

    def close_all(self) -> None:
        super().close_all()
        # Safety net: a test that failed half-way must leave no job of its cluster behind.
        listing = subprocess.run(
            ["squeue", "-h", "-o", "%i %k"],
            capture_output=True,
            text=True,
            env=self.slurm.environment(),
            check=False,
        )
        for line in listing.stdout.splitlines():
            job_id, _, comment = line.partition(" ")
            if f"cluster={self.cluster_name};" in comment:
                subprocess.run(["scancel", job_id], env=self.slurm.environment(), check=False)

    def pass_time(self) -> None:
        time.sleep(0.1)

    def assert_gone(self, status: RunStatus) -> None:
        leftover = run_processes(status.run_id, self.cluster_name)
        assert not leftover, f"processes of {status.run_id} still run: {leftover}"


def run_processes(run_id: str, cluster: str) -> list[int]:
    """Processes whose environment names this run of this Flotilla cluster (a local engine,
    Slurm's or the Ray head, runs on this machine, so its jobs' processes are visible here)."""
    wanted = {f"FLOTILLA_RUN={run_id}".encode(), f"FLOTILLA_CLUSTER={cluster}".encode()}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environment = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if wanted <= environment:
            found.append(int(entry.name))
    return found


def read_all(backend: Backend, run_id: str, stream: LogStream = LogStream.STDOUT) -> str:
    chunk = backend.logs(LogsRequest(run_id, stream=stream))
    return chunk.text


def read_replica(backend: Backend, run_id: str, task: str, replica: int = 0) -> str:
    return backend.logs(LogsRequest(run_id, task=task, replica=replica)).text


def node_of(backend: Backend) -> str:
    return backend.inventory().nodes[0].name


def request(
    backend: Backend,
    run_id: str,
    payload: dict[str, Any] | None,
    *,
    job: str = "job-a",
    replicas: int = 1,
    **fields: Any,
) -> DispatchRequest:
    node = node_of(backend)
    placements = tuple(ReplicaPlacement("main", index, node) for index in range(replicas))
    return DispatchRequest(
        run_id=run_id,
        job=job,
        cluster=backend.cluster,
        placements=placements,
        payload=payload,
        **fields,
    )
