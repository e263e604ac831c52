"""`flowlake.pipelines.lake.duckdb_connect`: an analyst's DuckDB over lake globs, counting exactly
when the compactor swaps an hour between DuckDB's listing of the files and its opening them.

Deterministic, as tests/hub/test_superset_swap.py does it for Superset: a DuckDB function that
the scan itself calls for its first rows exchanges the hour's folder with its compacted
replacement (renameat2 RENAME_EXCHANGE, what pipelines/compact.py does), after the files
were listed. A plain duckdb.connect() fails; the lake connection reruns and is exact.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import duckdb
import pytest

from flowlake.pipelines import lake as flowlake_lake
from flowlake.pipelines.lake import duckdb_connect

ROWS = 20_000
_LIBC = ctypes.CDLL(None, use_errno=True)


@pytest.fixture
def home(tmp_path):
    """One hour of 20 batch files and, beside it, its compacted replacement (the same rows)."""
    hour, new = tmp_path / "lake/flows/date=2026-11-23/hour=00", tmp_path / "lake/.compact/new"
    hour.mkdir(parents=True)
    new.mkdir(parents=True)
    w = duckdb.connect()
    for i in range(20):
        w.execute(f"COPY (SELECT range AS x FROM range({i * 1000}, {(i + 1) * 1000})) TO '{hour}/b{i}-0.parquet'")
    w.execute(f"COPY (SELECT range AS x FROM range(0, {ROWS})) TO '{new}/c0-000.parquet'")
    w.close()
    return tmp_path


def swapping(con, home) -> list[int]:
    """Register swap_once(x) on con: the first call exchanges the hour with the compacted
    folder; returns the list of renameat2 results (one entry per swap)."""
    hour, new = home / "lake/flows/date=2026-11-23/hour=00", home / "lake/.compact/new"
    swaps: list[int] = []

    def swap_once(_x):
        if not swaps:
            swaps.append(_LIBC.renameat2(-100, bytes(new), -100, bytes(hour), 2))  # RENAME_EXCHANGE
        return True

    con.create_function("swap_once", swap_once, ["BIGINT"], "BOOLEAN", side_effects=True)
    return swaps


def query(home) -> str:
    return f"SELECT x FROM read_parquet('{home}/lake/flows/**/*.parquet', hive_partitioning = true) WHERE swap_once(x)"


def test_plain_duckdb_fails_when_the_hour_is_swapped_mid_scan(home):
    con = duckdb.connect(config={"threads": 1})
    swaps = swapping(con, home)
    with pytest.raises(duckdb.IOException, match="No such file or directory"):
        con.execute(query(home)).fetchall()
    assert swaps == [0]  # the swap happened (and broke the read)


@pytest.mark.parametrize("read", ["fetchall", "df", "fetchmany", "connection_fetchall", "view_count"])
def test_duckdb_connect_reruns_and_counts_exactly(home, read, caplog):
    con = duckdb_connect(home, config={"threads": 1})
    assert con.lake == home / "lake"
    swaps = swapping(con, home)
    before = flowlake_lake.SWAP_RETRIED["statements"]
    if read == "fetchall":
        rows = [r[0] for r in con.execute(query(home) + " AND x >= ?", [0]).fetchall()]
    elif read == "df":
        rows = con.execute(query(home)).df()["x"].tolist()
    elif read == "fetchmany":
        res = con.execute(query(home))
        first = res.fetchmany(5)
        rows = [r[0] for r in first + res.fetchall()]
        assert res.fetchone() is None and res.description[0][0] == "x"
    elif read == "connection_fetchall":  # DuckDB's own idiom: con.execute(q); con.fetchall()
        con.execute(query(home))
        rows = [r[0] for r in con.fetchall()]
    else:  # the notebooks' idiom: a view over the glob, counted
        con.execute(f"CREATE VIEW flows AS SELECT * FROM read_parquet('{home}/lake/flows/**/*.parquet', "
                    "hive_partitioning = true, union_by_name = true)")
        (n,) = con.execute("SELECT count(*) FROM flows WHERE swap_once(x)").fetchone()
        rows = list(range(n))
    assert swaps == [0]  # the hour was swapped mid-scan once ...
    assert len(rows) == ROWS and len(set(rows)) == ROWS  # ... and every row counted once
    assert flowlake_lake.SWAP_RETRIED["statements"] == before + 1
    assert caplog.text.count("a lake file vanished during the read") == 1
    con.close()


def test_a_missing_file_outside_the_lake_is_not_rerun(home, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "gone.parquet"
    con = duckdb_connect(home)
    before = flowlake_lake.SWAP_RETRIED["statements"]
    with pytest.raises(duckdb.IOException, match="gone.parquet"):
        con.execute(f"SELECT * FROM read_parquet('{elsewhere}')").fetchall()
    assert flowlake_lake.SWAP_RETRIED["statements"] == before


def test_default_home_is_the_configured_one(home, monkeypatch):
    from flowlake.base import config

    monkeypatch.setenv("FLOWLAKE_HOME", os.fspath(home))
    config.reset()
    try:
        assert duckdb_connect().lake == config.get().lake == home / "lake"
    finally:
        config.reset()


def test_every_notebook_reads_through_duckdb_connect():
    import json
    from pathlib import Path

    notebooks = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
    assert notebooks
    for path in notebooks:
        cells = json.loads(path.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        assert "duckdb_connect()" in code and "duckdb.connect(" not in code, path.name
        assert "flowlake.pipelines.lake.duckdb_connect()" in "".join(cells[0]["source"]), path.name  # documented up front


def test_the_lake_module_loads_without_flowlake():
    """Superset's virtualenv loads pipelines/lake.py by path (superset/superset_config.py) and
    has DuckDB but not flowlake: a flowlake import at its top silently switched off the
    rerun on a swap inside Superset. Only the standard library and DuckDB at the top."""
    import ast
    import sys as _sys

    path = Path(__file__).resolve().parents[2] / "pipelines" / "lake.py"
    tree = ast.parse(path.read_text())
    top = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            top.add(node.module.split(".")[0])
    assert top - {"__future__", "duckdb"} <= set(_sys.stdlib_module_names), top
