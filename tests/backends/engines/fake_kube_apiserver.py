"""A fake Kubernetes API server for the kubernetes backend's tests: real HTTP, real REST paths.

No API server can be installed on the test machines, so this one speaks the subset of the
Kubernetes REST API the backend uses, with the real paths, verbs and JSON shapes:

* ``/api/v1/nodes`` (list), ``/api/v1/namespaces/{ns}/pods`` (list, ``watch=true`` with
  ``resourceVersion``), ``.../pods/{name}`` (get, delete with ``gracePeriodSeconds``),
  ``.../pods/{name}/binding`` (create), ``.../pods/{name}/log`` (``limitBytes``,
  ``tailLines``);
* ``/apis/batch/v1/namespaces/{ns}/jobs`` (create, list, watch), ``.../jobs/{name}`` (get,
  merge, strategic-merge and JSON patch — an update validated as the real server does —,
  delete with ``propagationPolicy``),
  ``.../jobs/{name}/status`` (patch);
* ``/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups`` (create, get, list) and
  API discovery (``/apis/{group}/{version}``), for the CRDs in ``FakeCluster.api_groups``;
* ``/api/v1/namespaces/{ns}/services`` (create: the headless Service of a multi-replica run).

It answers as a real kube-apiserver v1.36 did (``fake_kube_semantics.py``; a test per point in
``tests/backends/test_fake_kube_apiserver.py``): an unknown field is dropped with a
``Warning: 299`` header unless ``fieldValidation=Strict`` (400); a value the 1.31 OpenAPI schema
refuses (``kubernetes-validate``), an Indexed Job without ``completions`` or a name over 63
characters is 422; Jobs and pods get the real defaults.

Behind the API sit tiny controllers run by one thread: a *Job controller* (Indexed Jobs: one pod
per completion index, at most ``parallelism`` active, counted through the job-tracking
finalizer, ``backoffLimit``, ``activeDeadlineSeconds``, suspend,
``FailureTarget``/``SuccessCriteriaMet`` before ``Failed``/``Complete``), a *garbage collector*
(owner references), a *scheduler* that binds pods whose ``schedulerName`` is one the fake
handles (``default-scheduler``, ``volcano``) to the first node, and a *kubelet* that runs a
bound pod's container command as a real local process (the image is ignored; ``$(VAR)``
expanded), writes its merged stdout/stderr as the pod log, stops it on deletion with SIGTERM,
then SIGKILL after the grace period, and reports an exit after ``status_delay``. With
``run_processes=False`` the kubelet runs nothing and tests move pods through phases themselves
(``set_running``, ``terminate``, ``append_log``).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from .fake_kube_cluster import (
    ApiError,
    FakeCluster,
    Obj,
    matches,
    now_rfc3339,
    status_object,
)
from .fake_kube_semantics import (
    Invalid,
    check_schema,
    default_job,
    drop_unknown_fields,
    patch,
    validate_job,
    validate_job_update,
)

ROUTES: list[tuple[str, re.Pattern[str]]] = [
    ("discovery", re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)$")),
    ("nodes", re.compile(r"^/api/v1/nodes$")),
    ("pods", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$")),
    ("pods", re.compile(r"^/api/v1/pods$")),
    ("pod", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$")),
    ("binding", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/binding$")),
    ("log", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$")),
    ("services", re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/services$")),
    ("jobs", re.compile(r"^/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs$")),
    ("job", re.compile(r"^/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs/(?P<name>[^/]+)$")),
    (
        "job-status",
        re.compile(r"^/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs/(?P<name>[^/]+)/status$"),
    ),
    (
        "podgroups",
        re.compile(r"^/apis/scheduling.volcano.sh/v1beta1/namespaces/(?P<ns>[^/]+)/podgroups$"),
    ),
    (
        "podgroup",
        re.compile(
            r"^/apis/scheduling.volcano.sh/v1beta1/namespaces/(?P<ns>[^/]+)/podgroups/(?P<name>[^/]+)$"
        ),
    ),
]
KINDS = {
    "nodes": "Node",
    "pods": "Pod",
    "jobs": "Job",
    "podgroups": "PodGroup",
    "services": "Service",
}
LIST_KINDS = {"Node": ("v1", "NodeList"), "Pod": ("v1", "PodList"), "Job": ("batch/v1", "JobList")}
LIST_KINDS["PodGroup"] = ("scheduling.volcano.sh/v1beta1", "PodGroupList")


def public(obj: Obj) -> Obj:
    """The object as served: without the fake's private bookkeeping fields."""
    served = copy.deepcopy(obj)
    status = served.get("status", {})
    for key in [key for key in status if key.startswith("_")]:
        del status[key]
    return served


class Handler(BaseHTTPRequestHandler):
    cluster: FakeCluster
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(
        self,
        code: int,
        body: Obj | bytes,
        content_type: str = "application/json",
        warnings: list[str] = [],  # noqa: B006 (read only)
    ) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        for warning in warnings:
            self.send_header("Warning", f"299 - {json.dumps(warning)}")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}") if length else {}

    def _route(self) -> tuple[str, dict[str, str], dict[str, str]]:
        url = urlparse(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        for name, pattern in ROUTES:
            found = pattern.match(url.path)
            if found:
                return name, found.groupdict(), query
        raise ApiError(
            404, "NotFound", f"the server could not find the requested resource {url.path}"
        )

    def _handle(self, method: str) -> None:
        cluster = self.cluster
        cluster.requests.append((method, self.path))
        try:
            if cluster.down:
                raise ApiError(503, "ServiceUnavailable", "the API server is shutting down")
            route, params, query = self._route()
            handler = getattr(self, f"_{method.lower()}_{route.replace('-', '_')}", None)
            if handler is None:
                raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {route}")
            handler(params, query)
        except ApiError as error:
            self._send(error.code, error.body)
        except Invalid as error:
            self._send(error.code, status_object(error.code, error.reason, str(error)))

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # --- collections ---

    def _collection(self, kind: str, params: dict[str, str], query: dict[str, str]) -> None:
        namespace = params.get("ns")
        selector = query.get("labelSelector")
        if query.get("watch") in ("true", "1"):
            self._watch(kind, namespace, selector, query)
            return
        with self.cluster.lock:
            items = [public(obj) for obj in self.cluster.list(kind, namespace, selector)]
            version = str(self.cluster.version)
        api_version, list_kind = LIST_KINDS[kind]
        self._send(
            200,
            {
                "apiVersion": api_version,
                "kind": list_kind,
                "metadata": {"resourceVersion": version},
                "items": items,
            },
        )

    def _watch(self, kind: str, namespace: str | None, selector: str | None, query: Obj) -> None:
        cluster = self.cluster
        since = int(query.get("resourceVersion") or cluster.version)
        deadline = time.time() + float(query.get("timeoutSeconds") or 30)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            self._stream_events(kind, namespace, selector, since, deadline)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _stream_events(
        self, kind: str, namespace: str | None, selector: str | None, since: int, deadline: float
    ) -> None:
        cluster = self.cluster
        with cluster.lock:
            oldest = cluster.events[0][0] if cluster.events else cluster.version + 1
            if since < oldest - 1 and since < cluster.version:
                gone = status_object(410, "Expired", f"too old resource version: {since}")
                self._chunk(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                return
        while time.time() < deadline and not cluster.down:
            with cluster.lock:
                fresh = [
                    (version, event, obj)
                    for version, k, event, obj in cluster.events
                    if version > since
                    and k == kind
                    and (namespace is None or obj["metadata"].get("namespace") == namespace)
                    and matches(selector, obj["metadata"].get("labels", {}))
                ]
                if not fresh:
                    since = max(since, cluster.version)
                    cluster.lock.wait(0.2)
                    continue
            for version, event, obj in fresh:
                line = json.dumps({"type": event, "object": public(obj)}).encode() + b"\n"
                self._chunk(line)
                since = version

    def _get_nodes(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._collection("Node", params, query)

    def _get_pods(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._collection("Pod", params, query)

    def _get_jobs(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._collection("Job", params, query)

    def _get_podgroups(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._require_group("scheduling.volcano.sh")
        self._collection("PodGroup", params, query)

    # --- single objects ---

    def _one(self, kind: str, params: dict[str, str]) -> Obj:
        obj = self.cluster.get(kind, params["ns"], params["name"])
        if obj is None:
            resource = {"Pod": "pods", "Job": "jobs.batch", "PodGroup": "podgroups"}[kind]
            raise ApiError(404, "NotFound", f'{resource} "{params["name"]}" not found')
        return obj

    def _get_pod(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._send(200, public(self._one("Pod", params)))

    def _get_job(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._send(200, public(self._one("Job", params)))

    def _get_podgroup(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._require_group("scheduling.volcano.sh")
        self._send(200, public(self._one("PodGroup", params)))

    def _create(
        self, kind: str, params: dict[str, str], api_version: str, query: dict[str, str]
    ) -> None:
        body = self._body()
        if body.get("kind") != kind or body.get("apiVersion") != api_version:
            raise ApiError(400, "BadRequest", f"expected {api_version} {kind}")
        warnings: list[str] = []
        if self.cluster.validate and kind != "PodGroup":
            unknown = drop_unknown_fields(body)
            if unknown and query.get("fieldValidation") == "Strict":
                version = api_version.split("/")[-1]
                fields = ", ".join(f'unknown field "{path}"' for path in unknown)
                raise ApiError(
                    400,
                    "BadRequest",
                    f'{kind} in version "{version}" cannot be handled as a {kind}: strict '
                    f"decoding error: {fields}",
                )
            warnings = [f'unknown field "{path}"' for path in unknown]
            check_schema(body)
            if kind == "Job":
                validate_job(body)
        meta = body.setdefault("metadata", {})
        namespace = meta.setdefault("namespace", params["ns"])
        if namespace != params["ns"]:
            raise ApiError(400, "BadRequest", "the namespace of the object does not match")
        with self.cluster.lock:
            if self.cluster.get(kind, namespace, meta["name"]) is not None:
                resource = {"Job": "jobs.batch", "PodGroup": "podgroups", "Service": "services"}[
                    kind
                ]
                raise ApiError(409, "AlreadyExists", f'{resource} "{meta["name"]}" already exists')
            if kind == "Job":
                default_job(body)
            created = self.cluster.put(kind, body, "ADDED")
            self._send(201, public(created), warnings=warnings)

    def _post_jobs(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._create("Job", params, "batch/v1", query)

    def _post_services(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._create("Service", params, "v1", query)

    def _post_podgroups(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._require_group("scheduling.volcano.sh")
        self._create("PodGroup", params, "scheduling.volcano.sh/v1beta1", query)

    def _require_group(self, group: str) -> None:
        if group not in self.cluster.api_groups:
            raise ApiError(404, "NotFound", "404 page not found\n")

    def _get_discovery(self, params: dict[str, str], query: dict[str, str]) -> None:
        group, version = params["group"], params["version"]
        served = {
            ("batch", "v1"): ["jobs", "jobs/status"],
            ("scheduling.volcano.sh", "v1beta1"): ["podgroups", "queues"],
            ("kueue.x-k8s.io", "v1beta1"): ["clusterqueues", "localqueues", "workloads"],
        }
        resources = served.get((group, version))
        if resources is None or (group != "batch" and group not in self.cluster.api_groups):
            self._send(404, b"404 page not found\n", "text/plain")
            return
        self._send(
            200,
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}",
                "resources": [
                    {"name": name, "singularName": "", "namespaced": True, "kind": "", "verbs": []}
                    for name in resources
                ],
            },
        )

    def _patch_job(
        self, params: dict[str, str], query: dict[str, str], status: bool = False
    ) -> None:
        content_type = self.headers.get("Content-Type", "")
        body = self._body()
        with self.cluster.lock:
            job = self._one("Job", params)
            changed = patch(copy.deepcopy(public(job)), content_type, body)
            if status:
                job["status"].update(changed.get("status", {}))
            else:
                validate_job_update(job, changed)
                job["metadata"] = changed["metadata"]
                job["spec"] = changed["spec"]
            self.cluster.put("Job", job)
            self._send(200, public(job))

    def _patch_job_status(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._patch_job(params, query, status=True)

    def _delete_options(self, query: dict[str, str]) -> Obj:
        options: Obj = self._body()
        if "propagationPolicy" in query:
            options.setdefault("propagationPolicy", query["propagationPolicy"])
        if "gracePeriodSeconds" in query:
            options.setdefault("gracePeriodSeconds", int(query["gracePeriodSeconds"]))
        return options

    def _delete_job(self, params: dict[str, str], query: dict[str, str]) -> None:
        options = self._delete_options(query)
        policy = options.get("propagationPolicy", "Background")
        if policy not in ("Foreground", "Background", "Orphan"):
            raise ApiError(
                422,
                "Invalid",
                f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
                f'"{policy}": supported values: "Foreground", "Background", "Orphan"',
            )
        with self.cluster.lock:
            job = self._one("Job", params)
            if policy == "Foreground":
                # The Job stays, with a deletion timestamp, until its pods are gone.
                job["metadata"].setdefault("deletionTimestamp", now_rfc3339())
                job["metadata"]["finalizers"] = ["foregroundDeletion"]
                self.cluster.put("Job", job)
                self._send(200, public(job))
                return
            if policy == "Orphan":
                for pod in self.cluster.owned_pods(job):
                    pod["metadata"]["ownerReferences"] = []
                    self.cluster.put("Pod", pod)
            # Background: the Job goes now; the garbage collector deletes what it owned.
            self.cluster.remove("Job", params["ns"], params["name"])
            meta = job["metadata"]
            self._send(
                200,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {
                        "name": meta["name"],
                        "group": "batch",
                        "kind": "jobs",
                        "uid": meta["uid"],
                    },
                },
            )

    def _delete_pod(self, params: dict[str, str], query: dict[str, str]) -> None:
        options = self._delete_options(query)
        with self.cluster.lock:
            pod = self._one("Pod", params)
            self.cluster.delete_pod(pod, options.get("gracePeriodSeconds"))
            self._send(200, public(pod))

    def _post_binding(self, params: dict[str, str], query: dict[str, str]) -> None:
        body = self._body()
        if self.cluster.validate:
            check_schema(body)
        with self.cluster.lock:
            pod = self._one("Pod", params)
            if pod["spec"].get("nodeName"):
                raise ApiError(
                    409,
                    "Conflict",
                    f'pod {params["name"]} is already assigned to node "{pod["spec"]["nodeName"]}"',
                )
            # A node that does not exist is not checked: the pod sits there until pod GC.
            pod["spec"]["nodeName"] = body["target"]["name"]
            self.cluster.put("Pod", pod)
        self._send(201, status_object(201, "", "") | {"status": "Success"})

    def _get_log(self, params: dict[str, str], query: dict[str, str]) -> None:
        with self.cluster.lock:
            pod = self._one("Pod", params)
            container = query.get("container", pod["spec"]["containers"][0]["name"])
            node = pod["spec"].get("nodeName")
            if container not in [c["name"] for c in pod["spec"]["containers"]]:
                raise ApiError(
                    400,
                    "BadRequest",
                    f"container {container} is not valid for pod {params['name']}",
                )
            if not node:
                self._send(204, b"", "text/plain")
                return
            if self.cluster.get("Node", "", node) is None:
                raise ApiError(404, "NotFound", f'nodes "{node}" not found')
            statuses = pod["status"].get("containerStatuses") or [{}]
            if "waiting" in statuses[0].get("state", {"waiting": {}}):
                raise ApiError(
                    400,
                    "BadRequest",
                    f'container "{container}" in pod "{params["name"]}" is waiting to start: '
                    "ContainerCreating",
                )
            data = self.cluster.pod_log(params["ns"], params["name"])
        if "tailLines" in query:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-int(query["tailLines"]) :]) if int(query["tailLines"]) else b""
        if "limitBytes" in query:
            data = data[: int(query["limitBytes"])]
        self._send(200, data, "text/plain")


class FakeApiServer:
    """The fake API server on a free loopback port, with its controller thread."""

    def __init__(
        self, *, run_processes: bool = True, validate: bool = True, status_delay: float = 0.3
    ) -> None:
        self.cluster = FakeCluster(
            run_processes=run_processes, validate=validate, status_delay=status_delay
        )
        handler = type("BoundHandler", (Handler,), {"cluster": self.cluster})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self.httpd.serve_forever, daemon=True),
            threading.Thread(target=self._controllers, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _controllers(self) -> None:
        while not self._stop.wait(0.02):
            self.cluster.step()

    def kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "fake-token-not-a-secret"}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "tester", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))
        return path

    def close(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.cluster.lock:
            self.cluster.kill_all()
        shutil.rmtree(self.cluster.log_dir, ignore_errors=True)
