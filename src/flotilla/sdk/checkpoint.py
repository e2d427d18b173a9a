"""A job's report "checkpointed now" (issue 28): ``flotilla.checkpoint()``.

Called by the job itself, right after it saved its state. The backend names a file in
``FLOTILLA_CHECKPOINT_FILE`` (local: in the run's scratch dir; Slurm: in its output dir; Ray:
in the cluster's ``checkpoint_dir``, when set; docs/backends.md); touching it is
the whole report: the backend reads the file's time at its next poll, the service keeps it on
the run, and victim selection counts the work a preemption would lose from then on.
"""

from __future__ import annotations

import os
from pathlib import Path

CHECKPOINT_FILE_VARIABLE = "FLOTILLA_CHECKPOINT_FILE"


def checkpoint() -> bool:
    """Report that the job saved its work just now. Returns False, doing nothing, where the
    job runs without a checkpoint file (outside Flotilla, or on a backend that gives none), so
    the same code runs anywhere."""
    name = os.environ.get(CHECKPOINT_FILE_VARIABLE)
    if not name:
        return False
    Path(name).touch()
    return True
