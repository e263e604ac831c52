"""Write the lake connection's views file (runs in .venv-superset: the file must be in
the storage format of Superset's DuckDB).

Usage: python lake_views.py VIEWS.json OUT.duckdb
VIEWS.json is a list of CREATE VIEW statements (superset/bundle.py, Bundle.views_sql()).
The file is built beside OUT and renamed over it, so a Superset reading the old file
keeps a complete one; the views read the lake only when queried.
"""
import json
import os
import sys
from pathlib import Path


def main(views_json: str, out: str) -> None:
    import duckdb

    statements = json.loads(Path(views_json).read_text())
    target = Path(out)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
        leftover.unlink(missing_ok=True)
    con = duckdb.connect(str(tmp))
    try:
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
