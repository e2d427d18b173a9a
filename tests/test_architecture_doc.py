"""docs/architecture.md names real places: every file or folder it puts in backticks exists.

A newcomer follows those names to the code; a rename that forgets the page leaves them
looking for a module that is gone. Paths are read as the page writes them: from the
repository root (``src/…``, ``tests/…``, ``docs/…``) or, for the layers, from
``src/flotilla/`` (``service/loop.py``, ``framework/``). A bare file name (``test_x.py``)
must exist somewhere under ``src/`` or ``tests/``; a glob must match something.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "src" / "flotilla"

_BACKTICKED = re.compile(r"`([^`\s]+)`")
_FILE_NAME = re.compile(r"^[\w.-]+\.(py|md|yaml|toml)$")


def named_paths(text: str) -> list[str]:
    """The backticked names that are paths: with a slash (not a URL path such as
    ``/metrics``, not ``../shared``, which lives beside the repository) or a bare file name."""
    found = []
    for name in _BACKTICKED.findall(text):
        if name.startswith(("/", "../", "http")):
            continue
        if "/" in name or _FILE_NAME.match(name):
            found.append(name)
    return found


def exists(name: str) -> bool:
    if "/" not in name:
        return any((ROOT / top).rglob(name) for top in ("src", "tests"))
    for base in (ROOT, PACKAGE):
        if any(character in name for character in "*?["):
            if any(base.glob(name)):
                return True
        elif (base / name).exists():
            return True
    return False


def test_the_paths_are_found_in_the_page() -> None:
    names = named_paths(
        "`service/loop.py` `src/flotilla/tracing.py` `framework/` `tests/x/*.yaml` "
        "`test_y.py` `POST /v1/jobs` `/metrics` `../shared/DESIGN.md` `flotilla.plugins`"
    )
    assert names == [
        "service/loop.py",
        "src/flotilla/tracing.py",
        "framework/",
        "tests/x/*.yaml",
        "test_y.py",
    ]


def test_every_path_the_architecture_page_names_exists() -> None:
    names = named_paths(PAGE.read_text())
    assert len(names) > 20  # the page still names its modules
    missing = sorted({name for name in names if not exists(name)})
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"
