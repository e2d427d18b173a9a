"""The Slurm backend: runs as batch jobs on a real Slurm cluster (docs/backends.md, ``slurm``)."""

from flotilla.backends.slurm.backend import SlurmBackend, make_slurm_backend

__all__ = ["SlurmBackend", "make_slurm_backend"]
