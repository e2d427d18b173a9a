"""A fake Kubernetes API server for the kubernetes backend's tests: real HTTP, real REST paths.

No API server can be installed on the test machines, so this one speaks the subset of the
Kubernetes REST API the backend uses, with the real paths, verbs and JSON shapes:

* ``/api/v1/nodes`` (list), ``/api/v1/namespaces/{ns}/pods`` (list, ``watch=true`` with
  ``resourceVersion``), ``.../pods/{name}`` (get, delete with ``gracePeriodSeconds``),
  ``.../pods/{name}/binding`` (create), ``.../pods/{name}/log`` (``limitBytes``);
* ``/apis/batch/v1/namespaces/{ns}/jobs`` (create, list, watch), ``.../jobs/{name}`` (get,
  merge patch, delete with ``propagationPolicy``), ``.../jobs/{name}/status`` (merge patch);
* ``/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups`` (create, get, list);
* ``/api/v1/namespaces/{ns}/services`` (create: the headless Service of a multi-replica run).

Every Job and Binding posted is validated against the real OpenAPI schema
(``kubernetes-validate``, strict) and refused with 422 when it does not conform, so a manifest
the backend gets wrong fails the tests the way a real API server would.

Behind the API sit three tiny controllers run by one thread: a *Job controller* (Indexed Jobs:
one pod per completion index, ``backoffLimit``, ``activeDeadlineSeconds``, suspend, foreground
and background deletion), a *scheduler* that binds pods whose ``schedulerName`` is one the
fake handles (``default-scheduler``, ``volcano``) to the first node, and a *kubelet* that runs
a bound pod's container command as a real local process (the image is ignored), writes its
merged stdout/stderr as the pod log, and stops it on deletion with SIGTERM, then SIGKILL after
the grace period. With ``run_processes=False`` the kubelet does nothing and tests move pods
through phases themselves (``set_running``, ``terminate``, ``append_log``).
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

import kubernetes_validate

from .fake_kube_cluster import (
    ApiError,
    FakeCluster,
    Obj,
    matches,
    now_rfc3339,
    status_object,
)

SCHEMA_VERSION = "1.31"

ROUTES: list[tuple[str, re.Pattern[str]]] = [
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


def merge_patch(target: Obj, patch: Obj) -> Obj:
    """RFC 7386 JSON merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def check_schema(manifest: Obj) -> None:
    try:
        kubernetes_validate.validate(manifest, SCHEMA_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        path = ".".join(str(part) for part in error.path)
        raise ApiError(
            422, "Invalid", f"{manifest.get('kind')} is invalid: {path}: {error.message}"
        ) from None


def public(obj: Obj) -> Obj:
    """The object as served: without the fake's private bookkeeping fields."""
    served = copy.deepcopy(obj)
    served.get("status", {}).pop("_started", None)
    return served


class Handler(BaseHTTPRequestHandler):
    cluster: FakeCluster
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, code: int, body: Obj | bytes, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Obj:
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
        self._send(200, public(self._one("PodGroup", params)))

    def _create(self, kind: str, params: dict[str, str], api_version: str) -> None:
        body = self._body()
        if body.get("kind") != kind or body.get("apiVersion") != api_version:
            raise ApiError(400, "BadRequest", f"expected {api_version} {kind}")
        if self.cluster.validate and kind != "PodGroup":
            check_schema(body)
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
                body["spec"].setdefault("backoffLimit", 6)
                body["spec"].setdefault("completions", 1)
                body["spec"]["template"]["spec"].setdefault("schedulerName", "default-scheduler")
                body["status"] = {}
            created = self.cluster.put(kind, body, "ADDED")
            self._send(201, public(created))

    def _post_jobs(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._create("Job", params, "batch/v1")

    def _post_services(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._create("Service", params, "v1")

    def _post_podgroups(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._create("PodGroup", params, "scheduling.volcano.sh/v1beta1")

    def _patch_job(
        self, params: dict[str, str], query: dict[str, str], status: bool = False
    ) -> None:
        content_type = self.headers.get("Content-Type", "")
        if content_type != "application/merge-patch+json":
            raise ApiError(
                415, "UnsupportedMediaType", f"the fake takes merge patches, not {content_type}"
            )
        patch = self._body()
        with self.cluster.lock:
            job = self._one("Job", params)
            if status:
                merge_patch(job.setdefault("status", {}), patch.get("status", {}))
            else:
                merge_patch(job, {key: patch[key] for key in ("metadata", "spec") if key in patch})
            self.cluster.put("Job", job)
            self._send(200, public(job))

    def _patch_job_status(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._patch_job(params, query, status=True)

    def _delete_options(self, query: dict[str, str]) -> Obj:
        options = self._body()
        if "propagationPolicy" in query:
            options.setdefault("propagationPolicy", query["propagationPolicy"])
        if "gracePeriodSeconds" in query:
            options.setdefault("gracePeriodSeconds", int(query["gracePeriodSeconds"]))
        return options

    def _delete_job(self, params: dict[str, str], query: dict[str, str]) -> None:
        options = self._delete_options(query)
        policy = options.get("propagationPolicy", "Background")
        if policy not in ("Foreground", "Background", "Orphan"):
            raise ApiError(400, "BadRequest", f"unknown propagationPolicy {policy!r}")
        with self.cluster.lock:
            job = self._one("Job", params)
            pods = self.cluster.list(
                "Pod", params["ns"], f"batch.kubernetes.io/job-name={params['name']}"
            )
            if policy == "Foreground":
                job["metadata"].setdefault("deletionTimestamp", now_rfc3339())
                job["metadata"]["finalizers"] = ["foregroundDeletion"]
                self.cluster.put("Job", job)
            else:
                self.cluster.remove("Job", params["ns"], params["name"])
            if policy != "Orphan":
                for pod in pods:
                    self.cluster.delete_pod(pod, None)
            self._send(200, public(job))

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
            node = body["target"]["name"]
            if self.cluster.get("Node", "", node) is None:
                raise ApiError(404, "NotFound", f'nodes "{node}" not found')
            pod["spec"]["nodeName"] = node
            self.cluster.put("Pod", pod)
        self._send(201, status_object(201, "", "") | {"status": "Success"})

    def _get_log(self, params: dict[str, str], query: dict[str, str]) -> None:
        self._one("Pod", params)
        data = self.cluster.pod_log(params["ns"], params["name"])
        if "limitBytes" in query:
            data = data[: int(query["limitBytes"])]
        self._send(200, data, "text/plain")


class FakeApiServer:
    """The fake API server on a free loopback port, with its controller thread."""

    def __init__(self, *, run_processes: bool = True, validate: bool = True) -> None:
        self.cluster = FakeCluster(run_processes=run_processes, validate=validate)
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
