"""The few API calls the backend makes, over the official ``kubernetes`` client, as plain dicts.

The client's generated models are bypassed (``_preload_content=False``): the backend reads
and writes the API's JSON directly, so it sees exactly what the server sends (and the
``Binding`` response, which the models fail to deserialise, is no problem). Every failure to
reach the server becomes ``BackendUnavailable`` naming the address; HTTP errors keep their
status code (``ApiFailure``) for the caller to decide.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import urllib3
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException

from flotilla.backends.interface import BackendUnavailable

Obj = dict[str, Any]


class ApiFailure(Exception):
    """The server answered with an error status (404, 409, 422…)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"HTTP {code}: {message}")
        self.code = code
        self.message = message


class KubeApi:
    """One API server, one namespace. Thread-safe (the client's pool is)."""

    def __init__(
        self,
        kubeconfig: Path | None,
        context: str | None,
        namespace: str | None,
        timeout: float,
    ) -> None:
        try:
            api_client = kube_config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig) if kubeconfig else None, context=context
            )
        except kube_config.ConfigException as error:
            raise ValueError(f"kubeconfig: {error}") from None
        # One attempt per call: a dead server must answer BackendUnavailable quickly, and the
        # caller (the scheduler loop) retries anyway.
        api_client.rest_client.pool_manager.connection_pool_kw["retries"] = False
        self.address: str = api_client.configuration.host
        self.namespace = namespace or _context_namespace(kubeconfig, context) or "default"
        self.timeout = timeout
        self.core = kube_client.CoreV1Api(api_client)
        self.batch = kube_client.BatchV1Api(api_client)
        self.custom = kube_client.CustomObjectsApi(api_client)
        self.client = api_client

    def _call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", self.timeout)
        try:
            return method(*args, _preload_content=False, **kwargs)
        except ApiException as error:
            if error.status in (None, 0) or (error.status >= 500 and error.status != 501):
                raise BackendUnavailable(
                    f"Kubernetes API server at {self.address} failed {what}: "
                    f"HTTP {error.status} {error.reason}"
                ) from None
            if error.status in (401, 403):
                # Credentials or RBAC: nothing the request can fix, but an operator can; the
                # caller retries, as for an outage, once the Role or token is fixed.
                raise BackendUnavailable(
                    f"Kubernetes API server at {self.address} refused {what}: HTTP "
                    f"{error.status} {_message(error.body)} (check the credentials and the "
                    "RBAC Role in docs/backends.md)"
                ) from None
            raise ApiFailure(int(error.status), _message(error.body)) from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise BackendUnavailable(
                f"Kubernetes API server at {self.address} does not answer ({what}): "
                f"{type(error).__name__}"
            ) from None
        except pydantic.ValidationError as error:
            # The client checks a body against its models before sending it: an unknown field
            # is refused here, named, as the server would refuse it under Strict.
            raise ApiFailure(400, _client_refusal(error)) from None

    def _json(self, what: str, method: Any, *args: Any, **kwargs: Any) -> Obj:
        response = self._call(what, method, *args, **kwargs)
        try:
            data: Obj = json.loads(response.data)
        except ValueError:
            raise BackendUnavailable(
                f"Kubernetes API server at {self.address} sent no JSON for {what}"
            ) from None
        return data

    # --- reads ---

    def list_nodes(self) -> Obj:
        return self._json("listing nodes", self.core.list_node)

    def list_pods(self, selector: str) -> Obj:
        return self._json(
            "listing pods", self.core.list_namespaced_pod, self.namespace, label_selector=selector
        )

    def list_all_pods(self) -> Obj:
        return self._json("listing pods", self.core.list_pod_for_all_namespaces)

    def list_jobs(self, selector: str) -> Obj:
        return self._json(
            "listing jobs", self.batch.list_namespaced_job, self.namespace, label_selector=selector
        )

    def get_job(self, name: str) -> Obj | None:
        try:
            return self._json("reading a job", self.batch.read_namespaced_job, name, self.namespace)
        except ApiFailure as error:
            if error.code == 404:
                return None
            raise

    def pod_log(self, pod: str, limit_bytes: int, tail_lines: int | None = None) -> bytes:
        """The first ``limit_bytes`` of the main container's log (of its last ``tail_lines``
        lines when given). Empty for a pod not started (204, 400) or gone (404)."""
        try:
            response = self._call(
                "reading a pod log",
                self.core.read_namespaced_pod_log,
                pod,
                self.namespace,
                container="main",
                limit_bytes=limit_bytes,
                **({"tail_lines": tail_lines} if tail_lines is not None else {}),
            )
        except ApiFailure as error:
            if error.code in (400, 404):
                return b""  # not started yet, or gone: no output to show
            raise
        data: bytes = response.data or b""
        return data

    def serves(self, group_version: str, resource: str) -> bool:
        """Whether the server serves ``resource`` of ``group/version`` (API discovery, which
        every authenticated identity may read): a CRD's API exists once it is installed."""
        group, version = group_version.split("/")
        try:
            listed = self._json(
                f"discovering {group_version}", self.custom.get_api_resources, group, version
            )
        except ApiFailure as error:
            if error.code == 404:
                return False
            raise
        return any(item.get("name") == resource for item in listed.get("resources", []))

    def watch(self, kind: str, selector: str, resource_version: str, timeout: int) -> Iterator[Obj]:
        """The events of one watch request (``ERROR`` events included), until it times out."""
        method = self.core.list_namespaced_pod if kind == "pods" else self.batch.list_namespaced_job
        response = self._call(
            f"watching {kind}",
            method,
            self.namespace,
            label_selector=selector,
            watch=True,
            resource_version=resource_version,
            timeout_seconds=timeout,
            allow_watch_bookmarks=True,
            _request_timeout=(self.timeout, timeout + self.timeout),
        )
        buffer = b""
        try:
            for chunk in response.stream(4096, decode_content=False):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
            raise BackendUnavailable(
                f"Kubernetes API server at {self.address} broke a watch of {kind}: "
                f"{type(error).__name__}"
            ) from None
        finally:
            response.release_conn()

    # --- writes ---

    def create_job(self, manifest: Obj) -> Obj:
        return self._json(
            "creating a job",
            self.batch.create_namespaced_job,
            self.namespace,
            manifest,
            field_validation="Strict",
        )

    def create_service(self, manifest: Obj) -> Obj:
        return self._json(
            "creating a service",
            self.core.create_namespaced_service,
            self.namespace,
            manifest,
            field_validation="Strict",
        )

    def create_pod_group(self, manifest: Obj) -> Obj:
        return self._json(
            "creating a PodGroup",
            self.custom.create_namespaced_custom_object,
            "scheduling.volcano.sh",
            "v1beta1",
            self.namespace,
            "podgroups",
            manifest,
            field_validation="Strict",
        )

    def bind(self, manifest: Obj) -> None:
        self._call(
            "binding a pod",
            self.core.create_namespaced_pod_binding,
            manifest["metadata"]["name"],
            self.namespace,
            manifest,
        )

    def annotate_job(self, name: str, annotations: dict[str, str]) -> Obj:
        """A JSON merge patch of the Job's annotations."""
        return self._json(
            "annotating a job",
            self.batch.patch_namespaced_job,
            name,
            self.namespace,
            {"metadata": {"annotations": annotations}},
            _content_type="application/merge-patch+json",
        )

    def scale_job(self, name: str, replicas: int, annotations: dict[str, str]) -> Obj:
        """A JSON merge patch that sets an Indexed Job's ``completions`` and ``parallelism``
        together (Kubernetes allows changing ``completions`` only so: elastic Indexed Jobs,
        GA since 1.31) and its annotations."""
        return self._json(
            "scaling a job",
            self.batch.patch_namespaced_job,
            name,
            self.namespace,
            {
                "metadata": {"annotations": annotations},
                "spec": {"completions": replicas, "parallelism": replicas},
            },
            _content_type="application/merge-patch+json",
        )

    def delete_job(self, name: str, propagation: str) -> None:
        self._call(
            "deleting a job",
            self.batch.delete_namespaced_job,
            name,
            self.namespace,
            body={"propagationPolicy": propagation},
        )

    def delete_pod(self, name: str, grace_period: int) -> None:
        self._call(
            "deleting a pod",
            self.core.delete_namespaced_pod,
            name,
            self.namespace,
            body={"gracePeriodSeconds": grace_period},
        )

    def close(self) -> None:
        self.client.close()


def _message(body: Any) -> str:
    """The server's message on one line (a plain-text body such as ``404 page not found\\n``
    included)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    try:
        text = str(json.loads(body).get("message", body))
    except (ValueError, TypeError, AttributeError):
        text = str(body)
    return " ".join(text.split())


def _client_refusal(error: pydantic.ValidationError) -> str:
    """The client's refusal of a body, one line: ``unknown field "spec.x"`` for each field its
    models do not know, else the first problem with its field's path."""
    problems = []
    for item in error.errors():
        # loc: the argument's position, then the path in the body ("2", "spec", "template"…).
        path = ""
        for part in item["loc"][1:]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        if item["type"] == "extra_forbidden":
            problems.append(f'unknown field "{path}"')
        else:
            problems.append(f"{path}: {item['msg']}")
    return "by the client's models (before sending): " + ", ".join(problems)


def _context_namespace(kubeconfig: Path | None, context: str | None) -> str | None:
    """The namespace the kubeconfig's context names, as ``kubectl`` would use it."""
    try:
        contexts, current = kube_config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None
        )
    except (kube_config.ConfigException, OSError):
        return None
    chosen = next((item for item in contexts if item["name"] == context), None) or current
    namespace = (chosen or {}).get("context", {}).get("namespace")
    return str(namespace) if namespace else None
