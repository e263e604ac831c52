"""Write the lake connection's views file (runs in .venv-superset: the file must be in
the storage format of Superset's DuckDB).

Usage: python lake_views.py VIEWS.json OUT.duckdb
VIEWS.json is a list of CREATE VIEW statements (superset/bundle.py, Bundle.views_sql()).
The file is built beside OUT and renamed over it, so a Superset reading the old file
keeps a complete one; the views read the lake only when queried. A view over a Delta
table (`delta_scan`) needs DuckDB's delta extension to be created: it is loaded from the
duckdb-extension-delta package's file.
"""
import json
import os
import sys
from pathlib import Path


def delta_extension_file(duckdb_version: str) -> Path:
    """DuckDB's delta extension as shipped by duckdb-extension-delta (LOADed from the file:
    nothing is downloaded); superset_config.py loads the same file into the lake connection."""
    try:
        import duckdb_extension_delta
    except ImportError:
        sys.exit(f"lake views: a lake table is a Delta table, but this virtualenv lacks "
                 f"duckdb-extension-delta=={duckdb_version}: run `make setup` (scripts/setup-superset.sh)")
    path = (Path(duckdb_extension_delta.__file__).resolve().parent / "extensions" / f"v{duckdb_version}"
            / "delta.duckdb_extension")
    if not path.is_file():
        sys.exit(f"lake views: {path} missing: install duckdb-extension-delta=={duckdb_version}")
    return path


def main(views_json: str, out: str) -> None:
    import duckdb

    statements = json.loads(Path(views_json).read_text())
    target = Path(out)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
        leftover.unlink(missing_ok=True)
    con = duckdb.connect(str(tmp))
    try:
        if any("delta_scan(" in stmt for stmt in statements):  # a view over a Delta table binds through it
            ext = str(delta_extension_file(duckdb.__version__)).replace("'", "''")
            con.execute(f"LOAD '{ext}'")
        for stmt in statements:
            try:
                con.execute(stmt)
            except duckdb.Error as exc:
                sys.exit(f"lake views: {exc}\n  in: {stmt[:300]}")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    os.replace(tmp, target)
    print(f"{len(statements)} views in {target}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
