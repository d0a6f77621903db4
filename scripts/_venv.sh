# Sourced by scripts/demo and scripts/test: create .venv on first use (idempotent) and activate it.
# torch is pinned to the CPU wheel that lies on this machine's disk: an unpinned torch would pull a
# multi-GB CUDA build. pyproject keeps a range, so a GPU machine's own torch satisfies it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
TORCH_PIN="${INKLING_TORCH_PIN:-torch==2.13.0}"
STAMP="$VENV/.inkling-setup-$(cat "$ROOT/pyproject.toml" "$ROOT/scripts/_venv.sh" | sha1sum | cut -c1-12)"
if [ ! -f "$STAMP" ]; then
  echo "setting up $VENV (first use) ..." >&2
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$TORCH_PIN"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT[dev]"
  rm -f "$VENV"/.inkling-setup-*
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export PYTHONUNBUFFERED=1
cd "$ROOT"
