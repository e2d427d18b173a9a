"""The Ray Jobs API as the backend needs it: one place that talks HTTP to a Ray head.

Built on Ray's own ``JobSubmissionClient`` (it packs and uploads a local ``working_dir``), with
two things added: every request has a timeout (the SDK has none, and a hung head must not hang
the scheduler loop), and every failure becomes one of the backend's errors with one line that
names the address — never a traceback, never the token.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from flotilla.backends.interface import BackendUnavailable, DispatchRejected

NOT_FOUND = "status code 404"


class RayJobsClient:
    """A thread-safe, lazily connected client of one Ray head's Jobs and State APIs.

    Connecting is deferred to the first call, so making a backend never fails when the head is
    down; each call raises ``BackendUnavailable`` (one line naming ``address``) until it is up.
    """

    def __init__(self, address: str, token: str | None, timeout: float) -> None:
        self.address = address.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout
        self._client: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never shows the token
        return f"RayJobsClient({self.address!r})"

    # --- the Jobs API ---

    def submit(self, **fields: Any) -> None:
        """Submit one Ray job. ``DispatchRejected`` when Ray refuses it as invalid (HTTP 400)."""
        client = self._connected()
        try:
            client.submit_job(**fields)
        except Exception as error:
            text = str(error)
            if "status code 400" in text and "already exists" not in text:
                raise DispatchRejected(
                    f"payload: Ray refused the job: {_last_line(text)}"
                ) from None
            if "already exists" in text:
                return  # a concurrent dispatch of the same replica won the race: same job
            raise self._unavailable("submit_job", error) from None

    def info(self, submission_id: str) -> Any | None:
        """The ``JobDetails`` of a submission id, or ``None`` when Ray never had it."""
        client = self._connected()
        try:
            return client.get_job_info(submission_id)
        except Exception as error:
            if NOT_FOUND in str(error):
                return None
            raise self._unavailable("get_job_info", error) from None

    def jobs(self) -> list[Any]:
        """Every job the head knows (``JobDetails``), finished ones included."""
        client = self._connected()
        try:
            return list(client.list_jobs())
        except Exception as error:
            raise self._unavailable("list_jobs", error) from None

    def stop(self, submission_id: str) -> bool:
        """Ask Ray to stop a job (SIGTERM, SIGKILL after the job's stop wait). False if it had
        already ended."""
        client = self._connected()
        try:
            return bool(client.stop_job(submission_id))
        except Exception as error:
            if NOT_FOUND in str(error):
                return False
            raise self._unavailable("stop_job", error) from None

    def logs(self, submission_id: str) -> str:
        """The job's whole driver log (Ray keeps stdout and stderr in one file)."""
        client = self._connected()
        try:
            return str(client.get_job_logs(submission_id))
        except Exception as error:
            if NOT_FOUND in str(error):
                return ""
            raise self._unavailable("get_job_logs", error) from None

    # --- the State API ---

    def nodes(self) -> list[Mapping[str, Any]]:
        """The cluster's nodes as ``GET /api/v0/nodes`` lists them (alive and dead)."""
        import requests

        try:
            answer = requests.get(
                f"{self.address}/api/v0/nodes",
                params={"detail": "1", "limit": "10000"},
                headers=self._headers,
                timeout=self._timeout,
            )
            answer.raise_for_status()
            body = answer.json()
            listed = body["data"]["result"]["result"]
        except Exception as error:
            raise self._unavailable("list nodes", error) from None
        return [node for node in listed if isinstance(node, Mapping)]

    # --- plumbing ---

    def _connected(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._connect()
            return self._client

    def _connect(self) -> Any:
        try:
            from ray.job_submission import JobSubmissionClient
        except ImportError:  # pragma: no cover - the extra is not installed
            raise BackendUnavailable(
                "the ray backend needs the ray package: install flotilla with the 'ray' extra"
            ) from None
        timeout = self._timeout

        class TimedClient(JobSubmissionClient):
            """The SDK's client with a timeout on every request."""

            def _do_request(self, method: str, endpoint: str, **kwargs: Any) -> Any:
                kwargs.setdefault("timeout", timeout)
                return super()._do_request(method, endpoint, **kwargs)

        try:
            return TimedClient(self.address, headers=dict(self._headers))
        except Exception as error:
            raise self._unavailable("connect", error) from None

    def _unavailable(self, what: str, error: BaseException) -> BackendUnavailable:
        line = _last_line(str(error)) or type(error).__name__
        return BackendUnavailable(f"Ray at {self.address} cannot be reached ({what}): {line}")


def _last_line(text: str) -> str:
    """The meaningful line of an SDK error (they embed the server's whole traceback)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip() not in ("", ".")]
    return lines[-1][:300] if lines else ""
