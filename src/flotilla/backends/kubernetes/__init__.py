"""The ``kubernetes`` backend: runs as Indexed batch/v1 Jobs (see ``backend`` and
docs/backends.md)."""

from flotilla.backends.kubernetes.backend import KubernetesBackend, make_kubernetes_backend

__all__ = ["KubernetesBackend", "make_kubernetes_backend"]
