"""What the real API server and kubelet do to an object, for the fake (fake_kube_apiserver.py).

Each function mirrors one behaviour a real control plane showed (kube-apiserver v1.36), so the
backend's tests fail where production would:

* field validation: an unknown field is dropped with a ``Warning: 299`` header (201), or
  refused with 400 under ``fieldValidation=Strict``; a wrong type is 422;
* Job validation (422): an Indexed Job needs ``completions``, a name is at most 63 characters,
  the pod template's ``restartPolicy`` is ``Never`` or ``OnFailure``;
* Job update validation (422): ``spec.template``, ``selector`` and ``completionMode`` are
  immutable, ``completions`` too except on an Indexed Job, and there only in tandem with
  ``parallelism`` (elastic Indexed Jobs, GA in 1.31); ``parallelism`` is mutable;
* Job and pod defaults: the controller-uid selector and labels, ``podReplacementPolicy``,
  ``suspend: false``; the job-tracking finalizer, the service-account token volume and
  ``JOB_COMPLETION_INDEX`` on every pod;
* the kubelet's ``$(VAR)`` expansion of command, args and env values (``$$`` is ``$``);
* patches: JSON merge, strategic merge (as a merge, for the maps the backend patches) and
  JSON patch (RFC 6902).
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from typing import Any

import kubernetes_validate

Obj = dict[str, Any]

SCHEMA_VERSION = "1.31"
MAX_NAME = 63
JOB_NAME = "batch.kubernetes.io/job-name"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
INDEX = "batch.kubernetes.io/job-completion-index"
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"


class Invalid(Exception):
    """A request the real server refuses: ``code`` (400, 422) and its message."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


def _path(parts: list[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def drop_unknown_fields(manifest: Obj) -> list[str]:
    """Remove every field the schema does not know from ``manifest`` (in place), as the real
    server's decoder does; the dropped fields' paths, ``spec.template.spec.containers[0].x``."""
    dropped: list[str] = []
    for _ in range(100):
        try:
            kubernetes_validate.validate(manifest, SCHEMA_VERSION, strict=True)
            return dropped
        except kubernetes_validate.ValidationError as error:
            if error.validator != "additionalProperties":
                return dropped  # a real error: check_schema reports it
            parent: Any = manifest
            for part in error.path:
                parent = parent[part]
            extra = sorted(set(parent) - set(error.schema.get("properties", {})))
            for key in extra:
                del parent[key]
                dropped.append(_path([*error.path, key]))
    return dropped


def check_schema(manifest: Obj) -> None:
    """422 for a value of the wrong type or shape (unknown fields are dropped beforehand)."""
    try:
        kubernetes_validate.validate(manifest, SCHEMA_VERSION, strict=False)
    except kubernetes_validate.ValidationError as error:
        raise Invalid(
            422,
            "Invalid",
            f"{manifest.get('kind')} is invalid: {_path(list(error.path))}: {error.message}",
        ) from None


def validate_job(job: Obj) -> None:
    """The Job validation the backend can trip (422, each field named)."""
    name = job["metadata"].get("name", "")
    spec = job.get("spec", {})
    problems = []
    if len(name) > MAX_NAME:
        problems.append(
            f'metadata.name: Invalid value: "{name}": must be no more than {MAX_NAME} characters'
        )
    if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
        problems.append("spec.completions: Required value: when completion mode is Indexed")
    policy = spec.get("template", {}).get("spec", {}).get("restartPolicy")
    if policy not in ("Never", "OnFailure"):
        problems.append(
            f'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", '
            f'"Never" (got {policy!r})'
        )
    if problems:
        listed = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
        raise Invalid(422, "Invalid", f'Job.batch "{name}" is invalid: {listed}')


def validate_job_update(old: Obj, new: Obj) -> None:
    """What the real server refuses in an update (patch) of a Job's spec (422, each field
    named), as ``ValidateJobSpecUpdate`` does with elastic Indexed Jobs on."""
    name = old["metadata"]["name"]
    before, after = old["spec"], new["spec"]
    problems = [
        f"spec.{field}: Invalid value: {json.dumps(after.get(field))}: field is immutable"
        for field in ("template", "selector", "completionMode")
        if after.get(field) != before.get(field)
    ]
    completions = after.get("completions")
    if completions != before.get("completions"):
        if after.get("completionMode") != "Indexed":
            problems.append(f"spec.completions: Invalid value: {completions}: field is immutable")
        elif completions is not None and completions != after.get("parallelism"):
            problems.append(
                f"spec.completions: Invalid value: {completions}: can only be modified in "
                "tandem with spec.parallelism"
            )
    if problems:
        listed = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
        raise Invalid(422, "Invalid", f'Job.batch "{name}" is invalid: {listed}')


def default_job(job: Obj) -> None:
    """The defaults the real server sets on a Job it creates (uid included)."""
    meta, spec = job["metadata"], job["spec"]
    uid = meta.setdefault("uid", str(uuid.uuid4()))
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    if spec["completionMode"] == "NonIndexed":
        spec.setdefault("completions", 1)
    spec.setdefault("parallelism", 1)
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    spec.setdefault("manualSelector", None)
    spec.pop("manualSelector")
    spec["selector"] = {"matchLabels": {CONTROLLER_UID: uid}}
    template = spec["template"]
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    labels.update(
        {
            CONTROLLER_UID: uid,
            "controller-uid": uid,
            JOB_NAME: meta["name"],
            "job-name": meta["name"],
        }
    )
    pod = template["spec"]
    pod.setdefault("schedulerName", "default-scheduler")
    pod.setdefault("terminationGracePeriodSeconds", 30)
    pod.setdefault("dnsPolicy", "ClusterFirst")
    pod.setdefault("securityContext", {})
    for container in pod["containers"]:
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("imagePullPolicy", "IfNotPresent")
    job["status"] = {}


def pod_from_template(job: Obj, index: int) -> Obj:
    """The pod the Job controller makes for one completion index, with what the API server
    adds on admission (the service-account token volume)."""
    template = copy.deepcopy(job["spec"]["template"])
    meta = template.setdefault("metadata", {})
    name = job["metadata"]["name"]
    meta.setdefault("labels", {})[INDEX] = str(index)
    meta.setdefault("annotations", {})[INDEX] = str(index)
    meta["name"] = f"{name}-{index}-{uuid.uuid4().hex[:5]}"
    meta["generateName"] = f"{name}-{index}-"
    meta["namespace"] = job["metadata"]["namespace"]
    meta["finalizers"] = [TRACKING_FINALIZER]
    meta["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": name,
            "uid": job["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    pod_spec = template["spec"]
    if job["spec"].get("completionMode") == "Indexed":
        pod_spec["hostname"] = f"{name}-{index}"
    pod_spec.setdefault("serviceAccountName", "default")
    token = f"kube-api-access-{uuid.uuid4().hex[:5]}"
    pod_spec.setdefault("volumes", []).append(
        {
            "name": token,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                ],
            },
        }
    )
    for container in pod_spec["containers"]:
        container.setdefault("volumeMounts", []).append(
            {
                "name": token,
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        )
        container.setdefault("env", []).append(
            {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{INDEX}']"}},
            }
        )
    return {"apiVersion": "v1", "kind": "Pod", **template, "status": {"phase": "Pending"}}


def expand(text: str, values: dict[str, str]) -> str:
    """The kubelet's expansion of a command, an arg or an env value: ``$(NAME)`` becomes the
    value of a defined ``NAME`` (an undefined one stays as written), ``$$`` becomes ``$``."""
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            end = text.find(")", i + 2)
            if end < 0:
                out.append(text[i:])
                break
            name = text[i + 2 : end]
            out.append(values[name] if name in values else text[i : end + 1])
            i = end + 1
        else:
            out.append(char + following)
            i += 2
    return "".join(out)


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


def json_patch(target: Obj, operations: list[Obj]) -> Obj:
    """RFC 6902 JSON patch: ``add``, ``replace``, ``remove``, ``test``."""
    for operation in operations:
        parts = [
            part.replace("~1", "/").replace("~0", "~") for part in operation["path"].split("/")[1:]
        ]
        parent: Any = target
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        key: Any = int(parts[-1]) if isinstance(parent, list) and parts[-1] != "-" else parts[-1]
        op = operation["op"]
        if op == "test":
            if parent[key] != operation["value"]:
                raise Invalid(422, "Invalid", f"test failed at {operation['path']}")
        elif op == "remove":
            del parent[key]
        elif op in ("add", "replace"):
            if isinstance(parent, list) and key == "-":
                parent.append(copy.deepcopy(operation["value"]))
            elif isinstance(parent, list) and op == "add":
                parent.insert(key, copy.deepcopy(operation["value"]))
            else:
                parent[key] = copy.deepcopy(operation["value"])
        else:
            raise Invalid(400, "BadRequest", f"unknown JSON patch op {op!r}")
    return target


PATCH_TYPES = (
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/json-patch+json",
)


def patch(target: Obj, content_type: str, body: Any) -> Obj:
    if content_type == "application/json-patch+json":
        return json_patch(target, body)
    if content_type in PATCH_TYPES:
        return merge_patch(target, body)
    raise Invalid(415, "UnsupportedMediaType", "the body of the request was in an unknown format")


def field_value(pod: Obj, path: str) -> str:
    """The downward API's fieldRef: ``spec.nodeName``, ``metadata.annotations['a.b/c']``."""
    keyed = re.match(r"^metadata\.(annotations|labels)\['(.+)'\]$", path)
    if keyed:
        return str(pod["metadata"].get(keyed.group(1), {}).get(keyed.group(2), ""))
    value: Any = pod
    for part in path.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return str(value)


def container_env(pod: Obj, container: Obj) -> dict[str, str]:
    """The container's environment as the kubelet makes it: in order, each value expanded
    against the variables defined before it."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = expand(item["value"], env)
        elif "fieldRef" in item.get("valueFrom", {}):
            env[item["name"]] = field_value(pod, item["valueFrom"]["fieldRef"]["fieldPath"])
    return env
