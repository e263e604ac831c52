#!/usr/bin/env bash
# Create (or refresh) Superset's own virtualenv .venv-superset from superset/requirements.txt.
# Idempotent: a venv whose installed requirements already match is left alone.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FLOWLAKE_SUPERSET_VENV:-$REPO/.venv-superset}"
REQ="$REPO/superset/requirements.txt"
PY="${PYTHON:-python3.11}"
STAMP="$VENV/.requirements.sha256"

want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [[ -x "$VENV/bin/superset" && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  echo "superset venv up to date: $VENV"
  exit 0
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "creating $VENV"
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet -r "$REQ"
# Fail here, not at first start, if the install is broken.
"$VENV/bin/python" -c "import superset, duckdb_engine, duckdb; print('superset', superset.__version__ if hasattr(superset, '__version__') else '?', 'duckdb', duckdb.__version__)"
echo "$want" > "$STAMP"
echo "superset venv ready: $VENV"
