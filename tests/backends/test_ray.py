"""The ray backend beyond the shared contract: how Flotilla's fields become Ray's, and what
happens when the head is down. The mapping tests need no engine; the rest run on the session's
real Ray head (``ray_head``)."""

from __future__ import annotations

import itertools
import socket
import time
import uuid
from typing import Any

import pytest

from flotilla.backends import (
    BackendRunState,
    BackendUnavailable,
    DispatchRejected,
    DispatchRequest,
    LogsRequest,
    LogStream,
    ReplicaPlacement,
    StatusRequest,
    load_backend,
)
from flotilla.backends.ray import RayBackend
from flotilla.backends.ray.client import RayJobsClient
from flotilla.backends.ray.jobs import Marker, build_submission, user_output
from flotilla.model.payload import parse_payload
from tests.timing import deadline

from .engines.ray_head import CUSTOM, GPUS, LABELS, RayHead
from .ray_support import RAY_WAIT_LIMIT

pytestmark = pytest.mark.xdist_group("ray")
"""One worker runs every test on the Ray head, so a session starts one head."""

PLACEMENT = ReplicaPlacement("main", 0, "10.0.0.7", (0,))


def marker(**fields: Any) -> Marker:
    values: dict[str, Any] = {
        "cluster": "gpu-farm",
        "run_id": "run-1",
        "job": "job-a",
        "task": "main",
        "replica": 0,
        "node": "10.0.0.7",
        "gpu_ids": (0,),
        "dispatched_at": 1700000000.25,
        "max_runtime": None,
        "replicas": 1,
        "index": 0,
    }
    values.update(fields)
    return Marker(**values)


def submission(
    payload: dict[str, Any],
    job_type: str = "command",
    placements: tuple[ReplicaPlacement, ...] = (PLACEMENT,),
    **fields: Any,
) -> Any:
    """The Ray job of the last of ``placements`` (the first one's node is 10.0.0.7)."""
    request = DispatchRequest(
        run_id="run-1",
        job="job-a",
        cluster="gpu-farm",
        placements=placements,
        payload=payload,
        job_type=job_type,
        env={"FLOTILLA_QUEUE": "research", "SHARED": "from-flotilla"},
        **fields,
    )
    made = build_submission(
        request,
        parse_payload(job_type, payload),
        request.placements[-1],
        marker(),
        "abc123",
        grace_period=2.5,
        master_addr="10.0.0.7",
    )
    return made.fields


# --- Flotilla fields → Ray fields (no engine) ---


def test_resources_become_the_entrypoint_resources() -> None:
    fields = submission(
        {"command": ["python", "train.py"]},
        resources={"main": {"cpu": 2, "gpu": 1, "memory": 2**30, "ssd": 1, "gpu_memory": 8}},
    )
    assert fields["entrypoint_num_cpus"] == 2
    assert fields["entrypoint_num_gpus"] == 1
    assert fields["entrypoint_memory"] == 2**30
    assert fields["entrypoint_resources"] == {"ssd": 1.0}
    assert fields["entrypoint_label_selector"] == {"ray.io/node-id": "abc123"}
    assert fields["submission_id"] == "gpu-farm--run-1--main--0"


def test_a_command_job_runs_its_command_with_the_env_layered() -> None:
    fields = submission(
        {"command": ["python", "-c", "print('a b')"], "env": {"SHARED": "from-user"}},
    )
    assert fields["entrypoint"] == "python -c 'print('\"'\"'a b'\"'\"')'"
    env = fields["runtime_env"]["env_vars"]
    assert env["SHARED"] == "from-user"  # the payload's env is the user's word
    assert env["FLOTILLA_QUEUE"] == "research"
    assert (env["FLOTILLA_RUN"], env["FLOTILLA_CLUSTER"]) == ("run-1", "gpu-farm")
    assert env["RAY_JOB_STOP_WAIT_TIME_S"] == "3"  # the grace, in whole seconds
    assert "CUDA_VISIBLE_DEVICES" not in env  # Ray sets it for the GPUs it grants
    assert "entrypoint_num_cpus" not in fields  # nothing asked: Ray's defaults
    cd = submission({"command": "make all", "working_dir": "/data/my project"})
    assert cd["entrypoint"] == "cd '/data/my project' && make all"


def test_a_gang_replica_gets_its_rank_and_the_first_replicas_node_as_rendezvous() -> None:
    placements = (
        PLACEMENT,
        ReplicaPlacement("main", 1, "10.0.0.7"),
        ReplicaPlacement("main", 2, "10.0.0.8"),
    )
    env = submission({"command": "torchrun train.py"}, placements=placements)["runtime_env"][
        "env_vars"
    ]
    assert (env["WORLD_SIZE"], env["RANK"], env["LOCAL_RANK"]) == ("3", "2", "0")
    assert env["MASTER_ADDR"] == "10.0.0.7"
    assert 20000 <= int(env["MASTER_PORT"]) < 32000
    assert (
        env["MASTER_PORT"]
        == submission({"command": "true"})["runtime_env"]["env_vars"]["MASTER_PORT"]
    )  # one port per run, whatever the replica


def test_a_ray_job_passes_its_runtime_env_and_max_runtime_is_enforced_on_the_node() -> None:
    fields = submission(
        {
            "entrypoint": "python train.py",
            "runtime_env": {"working_dir": "s3://bucket/code.zip", "pip": ["numpy"]},
        },
        job_type="ray",
        max_runtime=90.0,
    )
    assert fields["runtime_env"]["working_dir"] == "s3://bucket/code.zip"
    assert fields["runtime_env"]["pip"] == ["numpy"]
    assert fields["entrypoint"] == "timeout --kill-after 3s 90s /bin/sh -c 'python train.py'"
    assert Marker.from_metadata(fields["metadata"]) == marker()


def test_the_marker_round_trips_and_foreign_jobs_are_not_ours() -> None:
    original = marker(max_runtime=0.2, gpu_ids=(0, 1), replicas=3, index=2)
    assert Marker.from_metadata(original.to_metadata()) == original
    assert Marker.from_metadata({}) is None
    assert Marker.from_metadata({"owner": "someone"}) is None
    broken = {**original.to_metadata(), "flotilla_replica": "two"}
    assert Marker.from_metadata(broken) is None


def test_ray_preamble_is_cut_from_the_output() -> None:
    log = (
        "2026-11-23 21:26:11,297\tINFO job_manager.py:581 -- Runtime env is setting up.\n"
        "hello\n"
        "Running entrypoint for job c--r--main--0: echo hello\n"
        "world\n"
    )
    assert user_output(log, "c--r--main--0", "echo hello") == "hello\nworld\n"


def test_output_read_while_ray_writes_it_only_grows() -> None:
    """Read after every byte Ray's log gains, the output is always a prefix of the next read:
    a Ray line caught half-written is held back, not served and cut later (a follower's
    offset would then skip the job's own bytes)."""
    entrypoint = "for i in 1 2; do echo line $i; done"
    log = (
        "2026-11-23 21:26:11,297\tINFO job_manager.py:581 -- Runtime env is setting up.\n"
        "line 1\n"
        f"Running entrypoint for job c--r--main--0: {entrypoint}\n"
        "line 2\n"
    )
    reads = [user_output(log[:end], "c--r--main--0", entrypoint) for end in range(len(log) + 1)]
    for before, after in itertools.pairwise(reads):
        assert after.startswith(before), (before, after)
    assert reads[-1] == "line 1\nline 2\n"


def test_settings_are_checked_and_a_secret_is_never_shown() -> None:
    with pytest.raises(TypeError, match="adress"):
        load_backend("ray", cluster="c", adress="http://127.0.0.1:8265")
    with pytest.raises(ValueError, match="address"):
        RayBackend(cluster="c", address="127.0.0.1:8265")
    with pytest.raises(ValueError, match="cluster"):
        RayBackend(cluster="no/slash", address="http://127.0.0.1:8265")
    backend = load_backend("ray", cluster="c", address="http://127.0.0.1:8265", token="s3cr3t")
    assert "s3cr3t" not in repr(backend) and "s3cr3t" not in str(vars(backend))


def test_a_head_that_is_down_is_one_line_naming_the_address() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"http://127.0.0.1:{port}"
    backend = RayBackend(cluster="c", address=address, request_timeout=2.0)  # does not fail
    for call in (
        backend.inventory,
        backend.poll,
        lambda: backend.status(StatusRequest("run-1")),
    ):
        with pytest.raises(BackendUnavailable) as caught:
            call()
        assert address in str(caught.value)
        assert "\n" not in str(caught.value)


# --- on a real Ray head ---


def make(head: RayHead, **settings: Any) -> RayBackend:
    return RayBackend(
        cluster=f"ray-{uuid.uuid4().hex[:8]}", address=head.address, grace_period=1, **settings
    )


def wait_terminal(backend: RayBackend, run_id: str) -> Any:
    due = deadline(RAY_WAIT_LIMIT)
    while not (status := backend.status(StatusRequest(run_id))).state.terminal:
        assert not due.expired(), f"{run_id} never ended in {due.allowed:.0f}s: {status}"
        time.sleep(0.2)
    return status


def test_inventory_reports_the_heads_resources_labels_and_gpus(ray_head: RayHead) -> None:
    backend = make(ray_head)
    [node] = backend.inventory().nodes
    assert node.gpu_count == GPUS
    assert node.capacity["gpu"] == GPUS
    assert node.capacity["cpu"] >= 1
    assert node.capacity["memory"] > 0
    assert node.capacity["ssd"] == CUSTOM["ssd"]
    assert not any(":" in name for name in node.capacity)
    for key, value in LABELS.items():
        assert node.labels[key] == value
    assert node.labels["ray.io/node-id"]
    assert node.labels["backend"] == "ray"


def test_gpus_and_custom_resources_are_granted_by_ray_on_the_chosen_node(
    ray_head: RayHead,
) -> None:
    backend = make(ray_head)
    [node] = backend.inventory().nodes
    request = DispatchRequest(
        run_id="gpu-run",
        job="job-a",
        cluster=backend.cluster,
        placements=(ReplicaPlacement("main", 0, node.name, (1,)),),
        payload={"command": 'echo "gpus=$CUDA_VISIBLE_DEVICES node=$FLOTILLA_NODE"'},
        resources={"main": {"cpu": 0.5, "gpu": 1, "ssd": 1}},
    )
    backend.dispatch(request)
    status = wait_terminal(backend, "gpu-run")
    assert status.state is BackendRunState.SUCCEEDED, status
    output = backend.logs(LogsRequest("gpu-run")).text
    assert f"node={node.name}" in output
    granted = output.split("gpus=")[1].split()[0]
    assert granted in ("0", "1")  # one device, chosen by Ray
    details = RayJobsClient(ray_head.address, None, 10.0).info(
        f"{backend.cluster}--gpu-run--main--0"
    )
    assert details.driver_node_id == node.labels["ray.io/node-id"]


def test_a_request_ray_can_never_grant_is_rejected_naming_the_field(ray_head: RayHead) -> None:
    backend = make(ray_head)
    node = backend.inventory().nodes[0].name
    request = DispatchRequest(
        run_id="bad-gpu",
        job="job-a",
        cluster=backend.cluster,
        placements=(ReplicaPlacement("main", 0, node, (GPUS + 3,)),),
        payload={"command": "true"},
    )
    with pytest.raises(DispatchRejected, match=r"placements\[0\]\.gpu_ids"):
        backend.dispatch(request)


def test_a_failed_replica_stops_the_rest_of_its_gang(ray_head: RayHead) -> None:
    backend = make(ray_head)
    node = backend.inventory().nodes[0].name
    backend.dispatch(
        DispatchRequest(
            run_id="gang",
            job="job-a",
            cluster=backend.cluster,
            placements=tuple(ReplicaPlacement("worker", index, node) for index in range(2)),
            payload={
                "command": 'if [ "$FLOTILLA_REPLICA" = 0 ]; then exit 4; fi; sleep 300',
            },
        )
    )
    status = wait_terminal(backend, "gang")
    assert status.state is BackendRunState.FAILED
    assert status.exit_code == 4
    assert "worker/0" in status.message
    assert [replica.state for replica in status.replicas] == [
        BackendRunState.FAILED,
        BackendRunState.CANCELLED,
    ]


def test_a_dispatch_interrupted_half_way_is_completed_not_repeated(ray_head: RayHead) -> None:
    backend = make(ray_head)
    node = backend.inventory().nodes[0].name
    request = DispatchRequest(
        run_id="half",
        job="job-a",
        cluster=backend.cluster,
        placements=tuple(ReplicaPlacement("main", index, node) for index in range(2)),
        payload={"command": "echo replica-$FLOTILLA_REPLICA"},
    )
    # A scheduler that died after submitting the first replica's Ray job only:
    first = build_submission(
        request,
        parse_payload("command", request.payload),
        request.placements[0],
        marker(cluster=backend.cluster, run_id="half", node=node, gpu_ids=(), replicas=2, index=0),
        backend.inventory().nodes[0].labels["ray.io/node-id"],
        grace_period=1,
        master_addr=node,
    )
    RayJobsClient(ray_head.address, None, 10.0).submit(**first.fields)

    fresh = RayBackend(cluster=backend.cluster, address=ray_head.address)
    result = fresh.dispatch(request)
    assert result.dispatched_at == marker().dispatched_at  # the first attempt's
    assert wait_terminal(fresh, "half").state is BackendRunState.SUCCEEDED
    for index in range(2):
        text = fresh.logs(LogsRequest("half", task="main", replica=index)).text
        assert text.count(f"replica-{index}") == 1


def test_the_ray_tests_share_one_worker_and_so_one_head(request: pytest.FixtureRequest) -> None:
    """Under ``--dist loadgroup`` (scripts/test) every test on the Ray head runs on one xdist
    worker, so a test run starts one head, not one per worker (a head costs 20-60 s). xdist
    groups by a suffix on the node id, which pytest 9's node ids no longer carry."""
    if not getattr(request.config.option, "loadgroup", False):  # set on xdist's workers
        pytest.skip("only meaningful under pytest -n N --dist loadgroup")
    assert request.node.nodeid.endswith("@ray"), request.node.nodeid


def test_each_line_is_served_once_read_in_pages_while_the_job_writes(ray_head: RayHead) -> None:
    """Ray keeps one log of both streams: it is served as stdout and stderr is empty, so a
    reader of both streams (the SDK's and the dashboard's default) gets each line once, also
    when it follows the job in small pages from offsets while the job still prints."""
    backend = make(ray_head)
    node = backend.inventory().nodes[0].name
    lines = 40
    command = f'for i in $(seq 1 {lines}); do echo "out $i"; echo "err $i" >&2; sleep 0.05; done'
    backend.dispatch(
        DispatchRequest(
            run_id="numbered",
            job="job-a",
            cluster=backend.cluster,
            placements=(ReplicaPlacement("main", 0, node, ()),),
            payload={"command": command},
            resources={"main": {"cpu": 0.5}},
        )
    )
    read = {LogStream.STDOUT: b"", LogStream.STDERR: b""}
    done: set[LogStream] = set()
    due = deadline(RAY_WAIT_LIMIT)
    while len(done) < len(read):
        assert not due.expired(), f"never read to the end: {read}"
        grew = False
        for stream in set(read) - done:
            request = LogsRequest("numbered", stream, offset=len(read[stream]), limit=50)
            chunk = backend.logs(request)
            assert chunk.next_offset == len(read[stream]) + len(chunk.data)
            read[stream] += chunk.data
            grew = grew or bool(chunk.data)
            if chunk.complete:
                done.add(stream)
        if not grew:
            time.sleep(0.1)
    seen = (read[LogStream.STDOUT] + read[LogStream.STDERR]).decode().splitlines()
    expected = [f"{name} {i}" for i in range(1, lines + 1) for name in ("out", "err")]
    assert sorted(seen) == sorted(expected)
    assert backend.logs(LogsRequest("numbered")).data == read[LogStream.STDOUT]
