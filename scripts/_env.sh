# Shared by scripts/demo and scripts/test: make sure uv is there and the locked environment
# is installed. Everything comes from PyPI at the versions in uv.lock.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export UV_PYTHON_DOWNLOADS=never
UV_VERSION=0.13.8
if python3 -m uv --version 2>/dev/null | grep -q "uv ${UV_VERSION}"; then
  :
else
  echo "installing uv ${UV_VERSION} (the project's package manager)…" >&2
  python3 -m pip install --quiet "uv==${UV_VERSION}"
fi
uv() { python3 -m uv "$@"; }
uv sync --frozen --quiet --all-extras
# Bytecode, compiled once per lock: Python reads a module's cached bytecode even where
# PYTHONDONTWRITEBYTECODE is set (as in some CI shells), and without it every process compiles
# every module it imports again — about 1.6 s of CPU more for each `flotilla up` or CLI call
# (docs/performance.md, "Bytecode at install"). The project's own sources are checked each time
# (a changed file is compiled; the rest is only stat'ed).
bytecode_stamp=".venv/.bytecode-$(sha1sum uv.lock | cut -c1-16)"
if [ ! -e "$bytecode_stamp" ]; then
  echo "compiling the environment's bytecode (once per uv.lock)…" >&2
  .venv/bin/python -m compileall -q -j 0 .venv/lib > /dev/null 2>&1 || true  # a few vendored test files do not compile
  rm -f .venv/.bytecode-*
  touch "$bytecode_stamp"
fi
.venv/bin/python -m compileall -q -j 0 src > /dev/null
