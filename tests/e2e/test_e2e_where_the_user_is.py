"""Jobs run as their owner, where the user is (issue 37), on a real ``flotilla up`` started
as root (each owner a uid of its own from the range) and as a normal user (every job as that
user): ``flotilla run -- python train.py`` in a directory holding ``train.py`` runs it;
``examples/jobs/retry.yaml`` succeeds on its third attempt; a two-step pipeline of one owner
shares its files (and, as root, another owner's job cannot read them); a ``#SBATCH`` script
runs with its translated limits and a warning for each line it ignores."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from flotilla.backends.local.tree import cgroups_problem
from tests.e2e.service import FLOTILLA, Server, Services, wait_for
from tests.timing import limit

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="starts servers as root and as another user (CI runs as root)"
)


@dataclass
class Site:
    """A server and a project directory to submit from."""

    mode: str
    server: Server
    project: Path
    shared: Path

    def flotilla(
        self, *args: str, token: str = "alice-t", path: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``flotilla ARGS`` as a user types it in the project directory: this shell's
        environment (``path`` first on its ``PATH``), the owner's token."""
        environment = {
            **os.environ,
            "PATH": f"{path or FLOTILLA.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "FLOTILLA_SERVER": self.server.url,
            "FLOTILLA_TOKEN": token,
        }
        return subprocess.run(
            [str(FLOTILLA), *args],
            cwd=self.project,
            env=environment,
            capture_output=True,
            text=True,
            timeout=limit(180),
        )

    def why(self, job_id: str) -> str:
        """What the job's runs ended with, and their logs (for a failure's message)."""
        runs = self.job(job_id).get("runs") or []
        logs = (
            self.flotilla("logs", job_id).stdout + self.flotilla("logs", job_id, "--stderr").stdout
        )
        return f"{runs}\n{logs}\n{self.server.output()[-3000:]}"

    def job(self, job_id: str) -> dict[str, object]:
        answer = httpx.get(
            f"{self.server.url}/v1/jobs/{job_id}", headers={"Authorization": "Bearer alice-t"}
        )
        answer.raise_for_status()
        data: dict[str, object] = answer.json()
        return data


def _tokens(path: Path) -> Path:
    lines = ["users:"]
    for name in ("alice", "bob"):
        digest = hashlib.sha256(f"{name}-t".encode()).hexdigest()
        lines.append(f"  - {{name: {name}, token_sha256: {digest}, queues: {{default: [submit]}}}}")
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)
    return path


@pytest.fixture(params=["root", "user"])
def site(request: pytest.FixtureRequest, services: Services) -> Iterator[Site]:
    mode = request.param
    if mode == "root" and cgroups_problem() is not None:
        pytest.skip(f"a uid per owner needs cgroups: {cgroups_problem()}")
    base = Path("/var/tmp") / f"flotilla-e2e-where-{os.getpid()}-{mode}"
    shutil.rmtree(base, ignore_errors=True)
    server_dir, project, shared = base / "server", base / "project", base / "shared"
    for directory in (base, server_dir, project, shared):
        directory.mkdir(parents=True)
    # The user's project: theirs to write in (as root, the jobs' uids are not root's).
    project.chmod(0o1777)
    shared.chmod(0o1777)
    base.chmod(0o755)
    extra = ["--auth", str(_tokens(base / "tokens.yaml")), "--cycle-interval", "0.1"]
    if mode == "root":
        first = 59000 + (os.getpid() % 40) * 20
        server = services.start(
            db=f"sqlite:///{server_dir / 'f.db'}",
            state_dir=server_dir / "local",
            workdir=server_dir,
            extra=[*extra, "--uid-range", f"{first}-{first + 19}"],
            token="alice-t",
        )
    else:
        server_dir.chmod(0o700)
        os.chown(server_dir, NOBODY, NOBODY)
        server = services.start(
            db=f"sqlite:///{server_dir / 'f.db'}",
            state_dir=server_dir / "local",
            workdir=server_dir,
            extra=extra,
            token="alice-t",
            as_user=NOBODY,
            env={
                "HOME": str(server_dir),
                "FLOTILLA_RUNTIME_DIR": str(server_dir / "run"),
                "FLOTILLA_SECRET_KEY_FILE": str(server_dir / "secret.key"),
            },
        )
    try:
        yield Site(mode, server, project, shared)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def _submitted(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.split()[0]


def test_run_python_train_py_in_the_directory_holding_it(site: Site) -> None:
    # The user's environment: their own bin dir first on PATH, with a `python` anyone may run
    # (this suite's venv may live where other users cannot reach, as pyenv's under /root).
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    assert python is not None
    bin_dir = site.project / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(python)
    (site.project / "train.py").write_text(
        "import os, sys\nprint('trained in', os.getcwd(), 'by', sys.executable)\n"
    )
    (site.project / "train.py").chmod(0o644)
    result = site.flotilla("run", "--wait", "-q", "--", "python", "train.py", path=bin_dir)
    job_id = result.stdout.split()[0]
    assert result.returncode == 0, (result.stdout, result.stderr, site.why(job_id))
    logs = site.flotilla("logs", job_id)
    assert logs.stdout == f"trained in {site.project} by {bin_dir / 'python'}\n", logs


def test_the_retry_example_succeeds_on_its_third_attempt(site: Site) -> None:
    job_id = _submitted(site.flotilla("submit", "-q", str(ROOT / "examples/jobs/retry.yaml")))
    try:
        waited = site.flotilla("wait", job_id, "--timeout", f"{limit(90):.0f}")
        assert waited.returncode == 0, (waited.stdout, site.why(job_id))
        runs = site.job(job_id)["runs"]
        assert isinstance(runs, list)
        assert [run["state"] for run in runs] == ["failed", "failed", "succeeded"], runs
        assert "attempt 3" in site.flotilla("logs", job_id).stdout
    finally:
        Path(f"/var/tmp/flotilla-flaky-{job_id}").unlink(missing_ok=True)


def test_a_pipeline_of_one_owner_shares_its_files_and_another_owner_cannot_read_them(
    site: Site,
) -> None:
    data = site.shared / "step1.out"
    first = _submitted(
        site.flotilla("run", "-q", "-J", "step1", "--", f"umask 077; echo one > {data}")
    )
    second = site.flotilla(
        "run", "-q", "--wait", "-J", "step2", "--dependency", f"afterok:{first}",
        "--", f"echo two >> {data} && cat {data}",
    )  # fmt: skip
    assert second.returncode == 0, second.stdout + second.stderr
    assert data.read_text() == "one\ntwo\n"
    assert (data.stat().st_mode & 0o777) == 0o600, "written by its owner's user alone"
    peek = site.flotilla("run", "-q", "--wait", "-J", "peek", "--", f"cat {data}", token="bob-t")
    shown = site.flotilla("logs", peek.stdout.split()[0], token="bob-t").stdout
    if site.mode == "root":  # each owner a uid of its own
        assert peek.returncode == 1 and "one" not in shown, peek.stdout + shown
    else:  # every job runs as the server's user: shared (SECURITY.md says so)
        assert peek.returncode == 0 and shown == "one\ntwo\n", peek.stdout + shown


def test_an_sbatch_script_runs_with_its_limits_and_a_warning_per_ignored_line(
    site: Site,
) -> None:
    script = site.project / "train.sbatch"
    script.write_text(
        "#!/bin/sh\n"
        "#SBATCH -J sb-train\n"
        "#SBATCH --time=5\n"
        "#SBATCH -c 1 --mem=256M\n"
        "#SBATCH -o train-%j.out\n"
        "#SBATCH --mail-type=END\n"
        "#SBATCH --account=physics\n"
        'echo "epoch 1 of $FLOTILLA_JOB_NAME"\n'
        "echo to-stderr >&2\n"
    )
    script.chmod(0o600)  # read by the CLI: the job gets its text, not its path
    result = site.flotilla("run", "-q", "--wait", str(script.name))
    assert result.returncode == 0, result.stdout + result.stderr
    job_id = result.stdout.split()[0]
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: train.sbatch:6: #SBATCH --mail-type=END ignored (Flotilla has no such setting)",
        "warning: train.sbatch:7: #SBATCH --account=physics ignored (Flotilla has no such setting)",
    ], result.stderr
    spec = site.job(job_id)["spec"]
    assert isinstance(spec, dict)
    assert (spec["name"], spec["max_runtime"]) == ("sb-train", 300)
    assert spec["tasks"][0]["resources"] == {"cpu": 1, "memory": 256 * 2**20}
    out = site.project / f"train-{job_id}.out"
    wait_for(out.exists, 10, "the job's -o file")
    assert out.read_text() == "epoch 1 of sb-train\nto-stderr\n"
