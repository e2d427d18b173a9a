"""``#SBATCH`` lines of a batch script as ``flotilla run`` flags (issue 37): a Slurm user's
script runs with its limits, and each line Flotilla does not translate is named in a warning
instead of being dropped without a word.

Translated (each to the ``run`` flag of the same meaning): ``-J/--job-name``, ``-t/--time``
(Slurm's forms: ``MINUTES``, ``M:S``, ``H:M:S``, ``D-H[:M[:S]]``),
``-n/--ntasks`` (replicas; ``-N/--nodes`` when no ``--ntasks``: one replica per node),
``-c/--cpus-per-task``, ``--mem`` (Slurm's units: ``4G`` is 4Gi, a bare number MiB),
``--gres=gpu[:TYPE]:N`` and ``-G/--gpus``, ``-o/--output`` and ``-e/--error`` (``%j``,
``%x``, ``%A``, ``%a``, ``%N``, ``%%``), ``-a/--array`` (``0-N`` with an optional ``%K``),
``-d/--dependency`` (``afterok``, ``afterany``, ``afternotok``), ``-p/--partition`` (the
queue), ``--signal``
(``[B:]SIG[@SECONDS]``: the signal and grace a run is stopped with when preempted) and
``--requeue`` (retried, up to 5 times, when its node fails or its run is lost). Anything else
(``--account``, ``--mail-type``, ``--qos``…) is ignored, with a warning naming the line.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

DIRECTIVE = "#SBATCH"

SHORT = {
    "J": "job-name",
    "t": "time",
    "n": "ntasks",
    "N": "nodes",
    "c": "cpus-per-task",
    "o": "output",
    "e": "error",
    "a": "array",
    "d": "dependency",
    "p": "partition",
    "G": "gpus",
}
"""Slurm's short options that Flotilla translates, by their long names."""

FLAGS_WITHOUT_VALUE = frozenset(
    {"requeue", "no-requeue", "exclusive", "hold", "wait", "overcommit", "contiguous", "parsable"}
)
"""Long options of sbatch that take no value (the next word is not theirs)."""

SLURM_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)B?$", re.IGNORECASE)
SLURM_ARRAY = re.compile(r"^(\d+)(?:-(\d+))?(?:%(\d+))?$")


@dataclass
class Translated:
    """The ``run`` flags of a script's ``#SBATCH`` lines and a warning per line ignored."""

    flags: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _options(words: list[str]) -> list[tuple[str, str | None, str]]:
    """``(long name, value, as written)`` for each option of one ``#SBATCH`` line."""
    found: list[tuple[str, str | None, str]] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word.startswith("--"):
            name, sep, value = word[2:].partition("=")
            if (
                not sep
                and index < len(words)
                and not words[index].startswith("-")
                and name not in FLAGS_WITHOUT_VALUE
            ):
                value, index = words[index], index + 1
                sep = "="
            found.append((name, value if sep else None, word))
        elif word.startswith("-") and len(word) >= 2:
            letter, rest = word[1], word[2:]
            if rest.startswith("="):
                rest = rest[1:]
            if not rest and index < len(words) and not words[index].startswith("-"):
                rest, index = words[index], index + 1
            found.append((SHORT.get(letter, letter), rest or None, word))
        else:
            found.append(("", word, word))
    return found


SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def slurm_time(value: str) -> str | None:
    """Slurm's ``--time`` in seconds: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``,
    ``D-H:M:S`` (a bare number is minutes there, seconds in Flotilla); None otherwise."""
    found = SLURM_TIME.match(value.strip())
    if found is None:
        return None
    days, first, second, third = found.groups()
    numbers = [int(part) for part in (first, second, third) if part is not None]
    if days is not None:  # D-H[:M[:S]]
        hours, minutes, seconds = [*numbers, 0, 0][:3]
        total = ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    elif len(numbers) == 3:
        total = (numbers[0] * 60 + numbers[1]) * 60 + numbers[2]
    elif len(numbers) == 2:
        total = numbers[0] * 60 + numbers[1]
    else:
        total = numbers[0] * 60
    return str(total) if total > 0 else None


def slurm_memory(value: str) -> str | None:
    """Slurm's ``--mem`` (``4G``, ``500M``, ``2048``: MiB) as a Flotilla quantity."""
    found = SLURM_MEMORY.match(value.strip())
    if found is None:
        return None
    number, unit = found.group(1), (found.group(2) or "M").upper()
    return f"{number}{unit}i"


def gpu_count(gres: str) -> str | None:
    """``gpu:N`` or ``gpu:TYPE:N`` (of a ``--gres`` list) as a count; None without one."""
    for item in gres.split(","):
        parts = item.split(":")
        if parts[0] == "gpu":
            return parts[-1] if len(parts) > 1 and parts[-1].isdigit() else "1"
    return None


def slurm_array(value: str) -> str | None:
    """Slurm's ``0-9%2`` (indices from 0) as Flotilla's ``10%2``; None if not of that form."""
    found = SLURM_ARRAY.match(value.strip())
    if found is None:
        return None
    first, last, limit = found.groups()
    if last is None or int(first) != 0:
        return None
    size = int(last) + 1
    return f"{size}%{limit}" if limit else str(size)


def translate(lines: list[tuple[int, str]], path: str) -> Translated:
    """The ``run`` flags of ``lines`` (``(number, text after #SBATCH)``), and a warning for
    each option not translated."""
    done = Translated()
    ntasks = nodes = None
    for number, text in lines:
        try:
            words = shlex.split(text, comments=True)
        except ValueError as error:
            done.warnings.append(f"{path}:{number}: #SBATCH{text} ignored: {error}")
            continue
        for name, value, written in _options(words):
            flags = _flags(name, value)
            if name == "ntasks" and value is not None:
                ntasks = value
            elif name == "nodes" and value is not None:
                nodes = value.split("-")[0]
            elif flags is None:
                shown = written if value is None or "=" in written else f"{written} {value}"
                done.warnings.append(f"{path}:{number}: #SBATCH {shown} ignored ({_why(name)})")
            else:
                done.flags += flags
                if name == "signal":
                    done.warnings.append(
                        f"{path}:{number}: #SBATCH {written}: sent when the run is preempted, "
                        "with that grace (not before the time limit, as Slurm's)"
                    )
    replicas = ntasks or nodes
    if replicas is not None:
        if not replicas.isdigit():
            done.warnings.append(f"{path}: --ntasks/--nodes {replicas!r} ignored (not a count)")
        else:
            done.flags += ["--replicas", replicas]
    return done


def _why(name: str) -> str:
    if name in ("time", "mem", "gres", "array", "dependency", "signal", "gpus", "partition"):
        return "a form Flotilla does not translate"
    return "Flotilla has no such setting"


def _flags(name: str, value: str | None) -> list[str] | None:
    """The ``run`` flags of one option; None when it is not translated."""
    simple = {
        "job-name": "--name",
        "cpus-per-task": "--cpu",
        "output": "--output",
        "error": "--error",
        "partition": "--queue",
        "dependency": "--dependency",
        "gpus": "--gpu",
    }
    if name == "requeue" and value is None:
        return ["--requeue"]
    if value is None:
        return None
    if name in simple:
        if name == "partition" and "," in value:
            return None
        if name == "gpus" and not value.isdigit():
            return None
        return [simple[name], value]
    if name == "time":
        seconds = slurm_time(value)
        return None if seconds is None else ["--time", seconds]
    if name == "mem":
        memory = slurm_memory(value)
        return None if memory is None else ["--memory", memory]
    if name == "gres":
        count = gpu_count(value)
        return None if count is None else ["--gpu", count]
    if name == "array":
        array = slurm_array(value)
        return None if array is None else ["--array", array]
    if name == "signal":
        signal = value.split(":", 1)[1] if value[:2] in ("B:", "R:") else value
        return ["--signal", signal]
    return None


CONDITIONS = {"afterok": "succeeded", "afterany": "finished", "afternotok": "failed"}
"""Slurm's dependency types and the ``depends_on`` conditions they are."""


def dependencies(value: str) -> list[dict[str, str]]:
    """``--dependency TYPE:JOB[:JOB…][,TYPE:JOB…]`` as ``depends_on`` entries (a JOB is an id,
    an id prefix, a name — the newest job of that name — or ``QUEUE/NAME``). Raises
    ``ValueError`` naming what is not understood."""
    found: list[dict[str, str]] = []
    if "?" in value:
        raise ValueError("'?' (any one of several) is not supported: all must be met")
    for part in value.split(","):
        kind, sep, jobs = part.strip().partition(":")
        if kind not in CONDITIONS or not sep or not jobs:
            known = ", ".join(f"{name}:ID[:ID]" for name in CONDITIONS)
            raise ValueError(f"{part.strip()!r}: give {known}")
        for job in jobs.split(":"):
            if not job:
                raise ValueError(f"{part.strip()!r}: an empty job")
            found.append({"job": job, "condition": CONDITIONS[kind]})
    return found


def output_wrapper(stdout: str | None, stderr: str | None) -> list[str]:
    """The words that run a command with its standard output in ``stdout`` and its standard
    error in ``stderr`` (with ``stdout`` alone: both there, as Slurm), files of the working
    dir unless absolute, truncated at each start; ``%j`` and the like as Slurm's."""
    redirects = []
    if stdout:
        redirects.append(f">{_pattern(stdout)}")
    if stderr:
        redirects.append(f"2>{_pattern(stderr)}")
    elif stdout:
        redirects.append("2>&1")
    return ["/bin/sh", "-c", f'exec {" ".join(redirects)}; exec "$@"', "flotilla-job"]


PATTERN_PARTS = {
    "j": '"$FLOTILLA_JOB"',
    "x": '"$FLOTILLA_JOB_NAME"',
    "A": '"${FLOTILLA_ARRAY_ID:-$FLOTILLA_JOB}"',
    "a": '"${FLOTILLA_ARRAY_INDEX:-0}"',
    "N": '"$FLOTILLA_NODE"',
    "%": "%",
}


def _pattern(path: str) -> str:
    """A Slurm file name pattern as a shell word."""
    words: list[str] = []
    literal = ""
    index = 0
    while index < len(path):
        char = path[index]
        if char == "%" and index + 1 < len(path) and path[index + 1] in PATTERN_PARTS:
            code = path[index + 1]
            if code == "%":
                literal += "%"
            else:
                if literal:
                    words.append(shlex.quote(literal))
                    literal = ""
                words.append(PATTERN_PARTS[code])
            index += 2
            continue
        literal += char
        index += 1
    if literal:
        words.append(shlex.quote(literal))
    return "".join(words)
