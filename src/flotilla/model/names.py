"""How long a task's and a job's name may be: the limits every backend can hold, in one place.

The API's ``Name`` allows 253 characters, but the backends make other names out of a task's,
and a task name they cannot hold broke every run of its job (issue 35: a task name of 247–253
characters made each run ``lost`` and re-queued it forever). What each backend derives from a
task name, and so the longest it can take:

* ``local``: each replica's files in the run's directory, ``TASK-REPLICA.stdout``,
  ``.stderr``, ``.exit`` and the ``.exit.tmp`` its supervisor renames into place, and its
  cgroup ``TASK-REPLICA`` (``local_records.Run.log_file``, ``local_tree``): one path
  component each, at most ``FILE_NAME_MAX`` bytes;
* ``slurm``: the same files, ``TASK-REPLICA.stdout``, ``.stderr``, ``.exit``
  (``slurm/script.replica_file``), in the run's output directory;
* ``ray``: the Ray submission id ``CLUSTER--RUN--TASK--REPLICA`` (``ray/jobs.submission_id``),
  which Ray also uses in its log file names: Flotilla keeps the task part to
  ``RAY_TASK_NAME_MAX`` characters;
* ``kubernetes``: only the run's placement annotation (a JSON value); the Job and pod names
  come from the run id (``kubernetes/manifests.job_name``).

A task name longer than the shortest of these (``MAX_TASK_NAME``) is refused at submission,
whichever cluster the job may go to: where it runs is decided later. A job's name reaches no
backend but as ``FLOTILLA_JOB_NAME``; the names of its elements (``NAME-INDEX``, for ``count``
and ``array``) must fit the store's 253 characters as the name itself does.
"""

from __future__ import annotations

from flotilla.model.base import MAX_COUNT

FILE_NAME_MAX = 255
"""Bytes in one path component (Linux's ``NAME_MAX``; a cgroup directory's too)."""

NAME_MAX = 253
"""The longest name the API takes (``base.Name``) and the store holds."""

REPLICA_INDEX_MAX = MAX_COUNT - 1
"""The largest replica index a task has (``TaskSpec.replicas`` is at most ``MAX_COUNT``)."""

LOCAL_LONGEST_FILE_SUFFIX = ".exit.tmp"
"""The longest ending the ``local`` backend gives a replica's file (``TASK-REPLICA`` + it)."""

RAY_TASK_NAME_MAX = 100
"""The longest task name the ``ray`` backend puts in a submission id."""

TASK_NAME_LIMITS = {
    "local": FILE_NAME_MAX - len(f"-{REPLICA_INDEX_MAX}{LOCAL_LONGEST_FILE_SUFFIX}"),
    "slurm": FILE_NAME_MAX - len(f"-{REPLICA_INDEX_MAX}.stdout"),
    "ray": RAY_TASK_NAME_MAX,
    "kubernetes": NAME_MAX,
}
"""The longest task name each backend can hold (see the module docstring)."""

MAX_TASK_NAME = min(TASK_NAME_LIMITS.values())
"""The longest task name a job may give: one every backend can hold (100 characters)."""


def name_problems(name: str, tasks: list[str], elements: int | None) -> list[str]:
    """The problems with a job's ``name`` and its ``tasks``' names (field paths as the API
    writes them). ``elements``: the jobs its ``count`` or ``array`` makes (``None``: one, named
    ``name`` itself)."""
    problems = []
    if elements is not None:
        longest = f"{name}-{elements - 1}"
        if len(longest) > NAME_MAX:
            problems.append(
                f"name: {len(name)} characters; with {elements} elements the last is named "
                f"{len(longest)} characters long (NAME-{elements - 1}), and a job's name may "
                f"have at most {NAME_MAX}: give a name of at most "
                f"{NAME_MAX - len(longest) + len(name)} characters"
            )
    for index, task in enumerate(tasks):
        if len(task) > MAX_TASK_NAME:
            problems.append(
                f"tasks[{index}].name: {len(task)} characters; a task name may have at most "
                f"{MAX_TASK_NAME} (it names each replica's files, cgroup and Ray submission "
                "id: docs/jobs.md, Names)"
            )
    return problems
