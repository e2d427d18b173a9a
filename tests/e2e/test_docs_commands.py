"""Every command README.md, docs/*.md and the examples' comments show, run as written against
a real ``flotilla up`` (in a reader's order, placeholders filled in as a reader would), so the
docs stay true. Servers and live views are parsed by the CLI instead of started; what is left
out is listed with its reason in tests/e2e/docs_commands.py, and printed by the test."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import typer.main
from typer._click import ClickException

from flotilla.cli.main import app
from tests.e2e.docs_commands import (
    ROOT,
    RUN_LAST,
    Shown,
    Treatment,
    flotilla_arguments,
    shown_in_docs,
    shown_in_examples,
    treatment,
)
from tests.e2e.service import Services
from tests.timing import limit

VENV = Path(sys.executable).parents[1]
SHORT_ID = re.compile(r"^\s*([0-9a-f]{8,32})\s", re.MULTILINE)
ARRAY_ID = re.compile(r"^array ([0-9a-f]{8,32}):", re.MULTILINE)
SUBMITTED_BY_RUN = re.compile(r"^submitted \S+ ([0-9a-f]{8,32})\b", re.MULTILINE)
WAITING_JOB = re.compile(r"flotilla (?:reprioritize|hold|release|requeue) |/priority")
"""Commands for a waiting job: they get one that stays queued (a finished job is refused;
requeue leaves a queued job as it is)."""
STAND_INS = {
    "scenario.yaml": "examples/quickstart.yaml",
    "jobs.yaml": "examples/jobs/hello.yaml",
}
"""File operands the docs name generically, and the example a reader would use for them."""


@dataclass
class Reader:
    """The reader's session: a directory with the repository's examples and ``.venv``, the
    server's address and token, and the ids the commands so far printed."""

    cwd: Path
    env: dict[str, str]
    server: str
    job: str = ""
    array: str = ""
    waiting: str = ""
    """A job that stays queued (too big for this machine, held): for ``reprioritize``."""
    failures: list[str] = field(default_factory=list)

    def fill(self, command: Shown) -> str:
        text = command.text.replace("http://127.0.0.1:8467", self.server)
        for generic, example in STAND_INS.items():
            text = re.sub(rf"(?<![/\w.]){re.escape(generic)}", example, text)
        job = self.waiting if WAITING_JOB.search(text) else self.job
        text = re.sub(r"\bJOB(?:\.\.\.)?(?=\s|$)", job, text)
        text = re.sub(r"(?<![$\w])ID\b", job, text)
        return text.replace("ARRAY_ID", self.array)

    def run(self, command: Shown, prelude: list[str]) -> None:
        text = self.fill(command)
        variables = [self.fill(Shown(command.source, line, "")) for line in prelude]
        job = self.waiting if WAITING_JOB.search(text) else self.job
        script = "\n".join([*variables, f"ID={job}", text])
        started = time.monotonic()
        try:
            done = subprocess.run(
                ["bash", "-c", script],
                cwd=self.cwd,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
        except subprocess.TimeoutExpired:
            self.failures.append(f"{command.source}: `{text}` did not end in 180 s")
            return
        took = time.monotonic() - started
        with (self.cwd / "transcript.txt").open("a") as transcript:
            print(
                f"$ {text}   # {command.source}, exit {done.returncode}, {took:.1f} s",
                done.stdout,
                done.stderr,
                sep="\n",
                file=transcript,
            )
        if done.returncode != command.expected_exit:
            self.failures.append(
                f"{command.source}: `{text}` exited {done.returncode}, the doc says "
                f"{command.expected_exit}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
            )
            return
        self.remember(text, done.stdout)

    def remember(self, text: str, stdout: str) -> None:
        if "submit" not in text and " run " not in f" {text} ":
            return
        ids = SUBMITTED_BY_RUN.findall(stdout) or SHORT_ID.findall(stdout)
        if ids:
            self.job = ids[-1]
        arrays = ARRAY_ID.findall(stdout)
        if arrays:
            self.array = arrays[-1]


def parse_only(command: Shown) -> str | None:
    """Parse a server's or a live view's command line as the CLI would, without running it:
    every option must exist and every value convert. The problem, or ``None``."""
    words = flotilla_arguments(command.text)
    group = typer.main.get_command(app)
    try:
        with group.make_context("flotilla", list(words)) as context:
            name, sub, rest = group.resolve_command(context, list(words))
            assert sub is not None, words
            sub.make_context(name or "", rest, parent=context)
    except ClickException as problem:
        return f"{command.source}: `{command.text}`: {problem.format_message()}"
    return None


def reader_dir(tmp_path: Path) -> Path:
    cwd = tmp_path / "reader"
    cwd.mkdir()
    (cwd / "examples").symlink_to(ROOT / "examples")
    (cwd / ".venv").symlink_to(VENV)
    shims = cwd / "shims"
    shims.mkdir()
    # The docs' curl prints an error body and exits 0 on a 4xx; here a refusal fails.
    real = shutil.which("curl")
    assert real is not None, "curl is needed: the docs show curl commands"
    curl = shims / "curl"
    curl.write_text(f'#!/bin/sh\nexec {real} --fail-with-body --silent --show-error "$@"\n')
    curl.chmod(0o755)
    return cwd


def test_every_command_the_docs_show_runs_as_written(services: Services, tmp_path: Path) -> None:
    blocks = [*shown_in_docs(), shown_in_examples()]
    assert sum(len(block) for block in blocks) > 100, "the docs lost their commands?"
    server = services.start(
        db=f"sqlite:///{tmp_path / 'f.db'}",
        state_dir=tmp_path / "runs",
        extra=["--cycle-interval", "0.2"],
        projection=True,  # as the reader runs it: `why` may show an estimated start
    )
    cwd = reader_dir(tmp_path)
    env = {
        **os.environ,
        "FLOTILLA_SERVER": server.url,
        "FLOTILLA_TOKEN": server.token or "",
        "PATH": f"{cwd / 'shims'}:{VENV / 'bin'}:{os.environ['PATH']}",
        "COLUMNS": "200",
    }
    reader = Reader(cwd, env, server.url)
    waiting = server.http.post(
        "/v1/jobs",
        json={
            "name": "waits",
            "queue": "default",
            "hold_if_unfit": True,
            "tasks": [{"name": "main", "resources": {"cpu": 4096}}],
            "payload": {"command": ["true"]},
        },
    )
    assert waiting.status_code == 201, waiting.text
    reader.waiting = waiting.json()["ids"][0]

    parse_problems: list[str] = []
    left_out: list[str] = []
    last: list[tuple[Shown, list[str]]] = []
    ran = 0
    for block in blocks:
        prelude: list[str] = []
        for command in block:
            kind, reason = treatment(command)
            if re.fullmatch(r"""(?:\w+=(?:"[^"]*"|'[^']*'|[^\s;]+);?\s*)+""", command.text):
                prelude.append(command.text)  # S=…; H=…: the block's variables
            elif kind is Treatment.EXCLUDED:
                left_out.append(f"{command.source}: {command.text.splitlines()[0]} ({reason})")
            elif kind is Treatment.PARSE:
                problem = parse_only(command)
                if problem:
                    parse_problems.append(problem)
            elif RUN_LAST.search(command.text):
                last.append((command, list(prelude)))
            else:
                reader.run(command, prelude)
                ran += 1
    for command, prelude in last:
        reader.run(command, prelude)
        ran += 1
    print(f"ran {ran} commands; left out {len(left_out)}:", *left_out, sep="\n  ")
    assert not parse_problems, "\n".join(parse_problems)
    assert not reader.failures, "\n\n".join(reader.failures)


def test_every_bench_case_the_docs_name_exists() -> None:
    """The benchmark recipes are not run, but the cases they name must exist."""
    listed = subprocess.run(
        [sys.executable, "-m", "bench", "--list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=limit(120),
        check=True,
    ).stdout
    known = set(listed.split())
    named = {
        case
        for block in shown_in_docs()
        for command in block
        for case in re.findall(r"--case ([\w-]+)", command.text)
        if "bench" in command.text and case != "NAME"
    }
    assert named, "no bench case found in the docs"
    assert not named - known, f"bench cases the docs name that do not exist: {named - known}"


def test_a_command_the_doc_expects_to_fail_is_read_with_its_exit_code() -> None:
    shown = Shown("x", "flotilla submit too-big.yaml", "refused, exit 1")
    assert shown.expected_exit == 1
    assert shlex.split(Shown("x", "flotilla jobs", "").text) == ["flotilla", "jobs"]
