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
# DuckDB's delta extension (for views over Delta tables) loads from the package's file,
# offline; an existing venv with another DuckDB (2.0.0 before issue 38) is moved to the pin
# by the install above (the stamp no longer matches).
"$VENV/bin/python" - <<'PY'
import pathlib, duckdb, duckdb_engine, duckdb_extension_delta, superset  # noqa: F401
ext = pathlib.Path(duckdb_extension_delta.__file__).parent / "extensions" / f"v{duckdb.__version__}" / "delta.duckdb_extension"
con = duckdb.connect()
try:
    con.execute(f"LOAD '{ext}'")
    loaded = con.execute("SELECT loaded FROM duckdb_extensions() WHERE extension_name = 'delta'").fetchone()[0]
finally:
    con.close()  # a connection with the extension loaded is closed before exit
assert loaded, ext
print("superset", getattr(superset, "__version__", "?"), "duckdb", duckdb.__version__, "delta extension", ext.name)
PY
echo "$want" > "$STAMP"
echo "superset venv ready: $VENV"
