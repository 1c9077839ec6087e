# Sourced by the other scripts: creates .venv on first use, installs requirements.txt when it
# changed, and puts the venv first on PATH. Re-running is cheap (a stamp file records the install).
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${BERT_MGPU_VENV:-$REPO_ROOT/.venv}"
PYTHON_BIN="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtualenv $VENV"
  "$PYTHON_BIN" -m venv "$VENV"
fi
STAMP="$VENV/.requirements.sha1"
WANT="$(sha1sum "$REPO_ROOT/requirements.txt" | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "[setup] installing requirements.txt into $VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -r "$REPO_ROOT/requirements.txt"
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
# TensorFlow's C++ log level: engine/tf_env.py quiets the CPU-only noise unless you set it.
cd "$REPO_ROOT"
