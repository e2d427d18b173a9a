"""The tiny parent of every local replica: records the command's exit status in a file.

Run as ``python -I -S _supervise.py EXIT_FILE -- ARGV...`` (standard library only, so it starts
fast and needs no environment). It leads the replica's process group, so a SIGTERM to the group
reaches the command directly; the supervisor itself outlives SIGTERM to write down how the
command ended. The file is what lets a restarted backend report the outcome of a run that
finished while no backend was watching. A supervisor killed with SIGKILL writes nothing; the
backend then knows the outcome from its own records (it sent the kill) or reports the run lost.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys


def _write(path: str, outcome: dict[str, object]) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(outcome, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def main(arguments: list[str]) -> int:
    exit_file, separator, *argv = arguments
    if separator != "--" or not argv:
        print("usage: _supervise.py EXIT_FILE -- ARGV...", file=sys.stderr)
        return 2
    # A handler (not SIG_IGN) keeps the supervisor alive; exec resets it in the command.
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda *_: None)
    try:
        command = subprocess.Popen(argv)
    except OSError as error:
        _write(exit_file, {"exit_code": 127, "error": f"could not start {argv[0]!r}: {error}"})
        return 127
    while True:
        try:
            code = command.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for clarity
            continue
    _write(exit_file, {"exit_code": code})
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
