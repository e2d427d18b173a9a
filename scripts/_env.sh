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
