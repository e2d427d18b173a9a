"""The shell commands the docs show: found in README.md's and docs/*.md's fenced blocks and in
the header comments of examples/, and sorted into those run against a live server, those
whose options are only parsed, and those left out, each kind with its reason.

Read by tests/e2e/test_docs_commands.py; kept apart so the rules can be read (and extended)
on their own."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
EXAMPLES = tuple(sorted(p for p in (ROOT / "examples").rglob("*") if p.is_file()))

SHELL_TAGS = frozenset({"bash", "sh", "shell", "console"})
COMMAND_START = re.compile(
    r"^(?:[A-Z_]+=\S+\s+)*(?:\.venv/bin/|\./scripts/|flotilla\b|curl\b|python3? )"
)
"""An untagged fenced block is shell when a line starts like a command."""


class Treatment(StrEnum):
    RUN = "run"
    """Run as written (placeholders filled) against the live server; exit code checked."""
    PARSE = "parse"
    """A server or a terminal UI: the command line is parsed by the CLI (every option and
    value checked), not started."""
    EXCLUDED = "excluded"


@dataclass(frozen=True)
class Shown:
    """One command as a doc shows it."""

    source: str
    """``docs/jobs.md:102``: where it is shown."""
    text: str
    """The command, continuation lines joined, without its trailing comment."""
    comment: str

    @property
    def expected_exit(self) -> int:
        """What the doc says it exits with (``# refused, exit 1``); 0 unless it says."""
        said = re.search(r"\bexit (\d)\b", self.comment)
        return int(said.group(1)) if said else 0


# Reasons a shown command is not run. Order matters: the first pattern that matches decides.
EXCLUSIONS: tuple[tuple[re.Pattern[str], Treatment, str], ...] = tuple(
    (re.compile(pattern), treatment, reason)
    for pattern, treatment, reason in (
        (r"^\./scripts/test\b", Treatment.EXCLUDED, "the whole suite: CI runs exactly this"),
        (
            r"^\./scripts/demo\b",
            Treatment.EXCLUDED,
            "starts its own server on the default port 8467, which a parallel test run may "
            "hold; its steps are the README's, run here one by one",
        ),
        (
            r"^\./scripts/local-engines\b",
            Treatment.EXCLUDED,
            "starts a real Ray head and Slurm; tests/backends/engines covers the script",
        ),
        (
            r"(?:^|\s)(?:\.venv/bin/)?pytest\b",
            Treatment.EXCLUDED,
            "a test-suite invocation: CI runs these tests itself",
        ),
        (
            r"python3? -m uv run|python -m bench|PYTHONPATH=|^git |^cd |^VENV=|valgrind|apt-get"
            r"|^mkdir |^\./scripts/bench|^#",
            Treatment.EXCLUDED,
            "a benchmark or a measurement recipe of docs/performance.md or docs/testing.md "
            "(minutes of CPU, old commits in worktrees); bench names are checked by "
            "test_every_bench_case_the_docs_name_exists",
        ),
        (
            r"\[--|\[-o\b|SCENARIO|\bURL\b",
            Treatment.EXCLUDED,
            "a synopsis, not a command ([optional] parts, UPPER-case operands)",
        ),
        (
            r"--install-completion",
            Treatment.EXCLUDED,
            "writes the user's shell startup file; typer's own option",
        ),
        (
            r"flotilla (?:up|serve)\b",
            Treatment.PARSE,
            "starts a server (the live server of this test is itself a `flotilla up`)",
        ),
        (r"flotilla watch\b", Treatment.PARSE, "a live table until Ctrl-C"),
        (
            r"flotilla submit examples/jobs/on-(?:ray|slurm)\.yaml",
            Treatment.EXCLUDED,
            "needs the Ray and Slurm of ./scripts/local-engines and the fleet of "
            "examples/fleet.yaml (tests/e2e/test_e2e_ray.py, tests/backends/engines)",
        ),
        (
            r"flotilla fleet apply examples/fleet\.yaml",
            Treatment.EXCLUDED,
            "needs the Ray and Slurm of ./scripts/local-engines to be running",
        ),
        (
            r"flotilla replay\b",
            Treatment.EXCLUDED,
            "replays the scenario in real time (minutes at --speed 20); tests/cli and "
            "tests/sim cover replay against a live server",
        ),
        (
            r"--fleet changed\.yaml",
            Treatment.EXCLUDED,
            "needs the reader's own fleet file with a change; tests/e2e/test_e2e_whatif.py "
            "runs the same command against a changed quota",
        ),
        (
            r"curl -N\b",
            Treatment.EXCLUDED,
            "follows the event stream until the client stops it",
        ),
    )
)

RUN_LAST = re.compile(r"flotilla fleet (?:apply|show)\b")
"""A fleet change (it adds a simulated cluster that would take later jobs) and what shows it:
run after the rest, in the docs' order."""


def treatment(command: Shown) -> tuple[Treatment, str]:
    for pattern, kind, reason in EXCLUSIONS:
        if pattern.search(command.text):
            return kind, reason
    return Treatment.RUN, ""


def _logical_lines(body: str) -> list[str]:
    """Lines with ``\\`` continuations and open single quotes joined."""
    joined: list[str] = []
    pending = ""
    for line in body.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip() + " "
            continue
        if _open_quote(pending):
            continue
        if pending.strip():
            joined.append(pending.strip())
        pending = ""
    return joined


def _open_quote(line: str) -> bool:
    """True when ``line`` ends inside a quoted string (a quote in a comment does not count)."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return False
    return bool(quote)


def split_comment(line: str) -> tuple[str, str]:
    """The command and its ``# comment`` (a ``#`` outside quotes, after a space)."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].rstrip(), line[index + 1 :].strip()
    return line, ""


def _doc_blocks(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
        tag, body = match.group(1), match.group(2)
        shell = tag in SHELL_TAGS or (
            tag == "" and any(COMMAND_START.match(line) for line in body.splitlines())
        )
        if shell:
            blocks.append((text[: match.start()].count("\n") + 2, body))
    return blocks


def shown_in_docs() -> list[list[Shown]]:
    """Every shell block of README.md and docs/*.md, in order: its commands."""
    found = []
    for path in DOCS:
        for first_line, body in _doc_blocks(path):
            block = []
            for line in _logical_lines(body):
                command, comment = split_comment(line)
                if not command:
                    continue
                where = f"{path.relative_to(ROOT)}:{first_line}"
                block.append(Shown(where, command, comment))
            found.append(block)
    return found


EXAMPLE_COMMAND = re.compile(
    r"(?:`|#\s{2,}|\s{3})((?:\.venv/bin/)?flotilla [^`\n]*?)(?:`|$)", re.MULTILINE
)
EXAMPLE_PROSE = frozenset(
    {
        "flotilla up",
        "flotilla run",
        "flotilla submit",
        "flotilla describe",
        "flotilla submit --hold-if-unfit",
    }
)
"""Backquoted in a comment's prose, naming a command rather than showing a command line."""


def shown_in_examples() -> list[Shown]:
    """Commands the examples' comments show (in backquotes, or indented on a line of their
    own, or after three spaces)."""
    found = []
    for path in EXAMPLES:
        header = "\n".join(
            line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#")
        )
        for match in EXAMPLE_COMMAND.finditer(header):
            command = match.group(1).strip().rstrip(".;,")
            if command in EXAMPLE_PROSE:
                continue
            line = path.read_text(encoding="utf-8")[: match.start()].count("\n") + 1
            found.append(Shown(f"{path.relative_to(ROOT)}:{line}", command, ""))
    return found


def flotilla_arguments(command: str) -> list[str]:
    """The arguments after ``flotilla`` (environment assignments before it dropped)."""
    words = shlex.split(command)
    while words and re.match(r"^[A-Z_]+=", words[0]):
        words.pop(0)
    assert words and words[0].endswith("flotilla"), command
    return words[1:]
