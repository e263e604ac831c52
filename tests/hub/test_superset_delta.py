"""Superset over a lake table that is a Delta table (issue 38).

A view over a table folder with `_delta_log/` reads `delta_scan('<table>')` (superset/bundle.py);
the lake connection loads DuckDB's delta extension from the duckdb-extension-delta package's
file (offline) before it confines the connection (superset/superset_config.py); the views
file is rewritten when a table becomes a Delta table (superset_cli.refresh_views, run by
base/hooks.AFTER_LAKE_CHANGE). Checked here:
- Superset's own venv, no service: the views of a converted demo lake read the same rows,
  sums and column types as the Parquet views, the connection stays confined, the views file
  is rewritten once and then found current, and a process that leaves its connection open
  exits cleanly (the extension once made such processes abort at exit);
- a real Superset: chart data and SQL Lab give the same counts for the Delta flows table as
  for the Parquet one; and while a thread rewrites hours of the table again and again
  (delta-rs' replace and the compactor's own files, each committed on the version read),
  every chart-data and SQL Lab count is exact, none fails, and no statement is rerun.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from rich.console import Console

from flowlake import superset_cli
from flowlake.base import config, delta, hooks

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import test_superset  # noqa: E402

from superset_lake import DAYS, write_flows  # noqa: E402

REPO, SUPERSET_PY = test_superset.REPO, test_superset.SUPERSET_PY
superset, api = test_superset.superset, test_superset.api  # the one Superset of the run (fixtures)

PARTS = [("date", "string"), ("hour", "integer")]
RACE_DAY = "2026-11-25"  # a day of its own: the demo days (superset_lake.DAYS) stay as they are
RERUN_LINE = "a lake file vanished during the read"

READ_VIEWS = """
import json, runpy, sys, sqlalchemy as sa
conf = runpy.run_path('superset/superset_config.py')
eng = sa.create_engine('duckdb:///' + sys.argv[1], connect_args={'read_only': True}, poolclass=sa.pool.NullPool)
c = eng.connect()  # left open on purpose: the config closes connections with the extension at exit
types = [(r[0], r[1]) for r in c.execute(sa.text("DESCRIBE flows")).fetchall()]
agg = c.execute(sa.text("SELECT date::VARCHAR, count(*), sum(bytes), min(time_start)::VARCHAR, "
                        "count(DISTINCT exporter) FROM flows GROUP BY ALL ORDER BY 1")).fetchall()
try:
    c.execute(sa.text("SELECT * FROM read_csv(" + repr(sys.argv[2]) + ")")); escaped = True
except Exception:
    escaped = False
delta = int(c.execute(sa.text("SELECT count(*) > 0 FROM duckdb_functions() "
                              "WHERE function_name = 'delta_scan'")).scalar())
print(json.dumps({"types": types, "agg": [[str(v) for v in r] for r in agg], "escaped": escaped, "delta": delta}))
"""


def _read_views(views: Path, lake: Path, outside: Path) -> dict:
    env = {**os.environ, "FLOWLAKE_SUPERSET_STATE_DIR": str(views.parent), "FLOWLAKE_LAKE_DIR": str(lake),
           "FLOWLAKE_SUPERSET_SECRET_KEY": "x" * 40}
    res = subprocess.run([str(SUPERSET_PY), "-c", READ_VIEWS, str(views), str(outside)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, f"exit {res.returncode}: {res.stderr[-3000:]}"
    return json.loads(res.stdout)


@pytest.mark.slow  # seven Superset-venv processes (~1 min here): not in make check
def test_views_read_a_converted_table_like_its_parquet_files(tmp_path):

    home = tmp_path / "home"
    cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(home)})
    write_flows(cfg.lake, flows_per_day=3000)
    outside = tmp_path / "secret.csv"
    outside.write_text("a\n1\n")
    state = superset_cli.state_dir(cfg)
    state.mkdir(parents=True)
    (state / "provisioned.json").write_text("{}")  # refresh_views acts on a provisioned home only
    views = Path(superset_cli._bundle_module().views_db_path(cfg))

    assert superset_cli.refresh_views(cfg) == []  # first write: no Delta table yet
    assert superset_cli.refresh_views(cfg) is None  # current: not rewritten
    parquet = _read_views(views, cfg.lake, outside)
    assert parquet["delta"] == 0  # no Delta view: the extension is not loaded

    converted = delta.convert_in_place(cfg.lake / "flows", PARTS)
    assert converted["rows"] == 2 * 3000
    assert superset_cli.refresh_views(cfg) == ["flows"]
    assert superset_cli.refresh_views(cfg) is None
    sql = json.loads((state / "lake_views.json").read_text())
    flows_view = next(s for s in sql if s.startswith('CREATE OR REPLACE VIEW main."flows"'))
    assert f"delta_scan('{cfg.lake / 'flows'}')" in flows_view and "read_parquet" not in flows_view
    assert sum("delta_scan(" in s for s in sql) == 1  # the other tables keep their Parquet views

    for run in range(6):  # the exit check: a process with the extension loaded and a connection open
        got = _read_views(views, cfg.lake, outside)
        assert got["delta"] == 1 and got["escaped"] is False, run
        assert got["agg"] == parquet["agg"], run
        assert [r[0] for r in got["agg"]] == [d.isoformat() for d in DAYS]
        # the same columns and types (hour reads as its declared INTEGER, the glob's hive
        # value "00" as VARCHAR)
        assert [t for t in got["types"] if t[0] != "hour"] == [t for t in parquet["types"] if t[0] != "hour"]
        assert ("hour", "INTEGER") in [tuple(t) for t in got["types"]]


def test_a_table_without_files_is_empty_until_the_views_are_rewritten(tmp_path):
    """DuckDB 1.4 (Superset's, for the delta extension) fails a glob matching nothing:
    such a table's view is the typed empty relation; the table's first files make
    refresh_views rewrite it."""

    cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(tmp_path / "home")})
    state = superset_cli.state_dir(cfg)
    state.mkdir(parents=True)
    (state / "provisioned.json").write_text("{}")
    assert superset_cli.refresh_views(cfg) == []
    sql = json.loads((state / "lake_views.json").read_text())
    assert not any("read_parquet" in s for s in sql)
    write_flows(cfg.lake, flows_per_day=100)
    assert superset_cli.refresh_views(cfg) == []  # rewritten: the flows view globs now
    sql = json.loads((state / "lake_views.json").read_text())
    assert any("read_parquet" in s for s in sql if s.startswith('CREATE OR REPLACE VIEW main."flows"'))
    got = _read_views(Path(superset_cli._bundle_module().views_db_path(cfg)), cfg.lake, tmp_path / "x.csv")
    assert sum(int(r[1]) for r in got["agg"]) == 2 * 100


# ---- a real Superset ---------------------------------------------------------------------
def _chart_query(ds_id: int, date: str | None) -> dict:
    filters = [{"col": "date", "op": "==", "val": date}] if date else []
    return {"datasource": {"id": ds_id, "type": "table"}, "force": True,
            "queries": [{"metrics": [{"expressionType": "SQL", "sqlExpression": "COUNT(*)", "label": "n"},
                                     {"expressionType": "SQL", "sqlExpression": "SUM(bytes)", "label": "b"}],
                         "columns": ["exporter"], "filters": filters, "row_limit": 100,
                         "orderby": [[{"expressionType": "SQL", "sqlExpression": "exporter", "label": "exporter"},
                                      True]]}],
            "result_format": "json", "result_type": "full"}


class Readers:
    """Chart data (the dashboards' path) and SQL Lab, counting the flows of one day."""

    def __init__(self, api, date: str | None):
        self.api = api
        db = api.get(api.base + "/api/v1/database/?q=(page_size:10)").json()["result"][0]["id"]
        ds = api.get(api.base + "/api/v1/dataset/?q=(filters:!((col:table_name,opr:eq,value:flows)))").json()["result"]
        assert len(ds) == 1, ds
        self.chart = _chart_query(ds[0]["id"], date)
        where = f" WHERE date = '{date}'" if date else ""
        self.sqllab = {"database_id": db, "schema": "main", "runAsync": False,
                       "sql": f"SELECT exporter, count(*) AS n, sum(bytes) AS b FROM main.flows{where} "
                              "GROUP BY exporter ORDER BY exporter"}
        self.csrf = {"X-CSRFToken": api.get(api.base + "/api/v1/security/csrf_token/").json()["result"],
                     "Referer": api.base}

    def chart_data(self) -> list[tuple]:
        r = self.api.post(self.api.base + "/api/v1/chart/data", json=self.chart)
        assert r.status_code == 200, r.text[:500]
        return [(row["exporter"], int(row["n"]), int(row["b"])) for row in r.json()["result"][0]["data"]]

    def sql_lab(self) -> list[tuple]:
        r = self.api.post(self.api.base + "/api/v1/sqllab/execute/", json=self.sqllab, headers=self.csrf)
        assert r.status_code == 200, r.text[:500]
        return [(row["exporter"], int(row["n"]), int(row["b"])) for row in r.json()["data"]]


def _by_exporter(table: pa.Table) -> list[tuple]:
    grouped = table.group_by("exporter").aggregate([("bytes", "count"), ("bytes", "sum")]).sort_by("exporter")
    return [(r["exporter"], r["bytes_count"], r["bytes_sum"]) for r in grouped.to_pylist()]


@pytest.fixture(scope="module")
def delta_flows(superset, cfg):
    """The test lake's flows made a Delta table in place (only `_delta_log/` is added) and
    the views rewritten through the lake-change hook; put back as Parquet afterwards (the
    race day's folder and the log removed, views rewritten), as the other tests know it."""

    table = cfg.lake / "flows"
    converted = delta.convert_in_place(table, PARTS)
    assert converted["converted"] and converted["rows"] > 0
    console = Console(stderr=True)
    hooks.after_lake_change(cfg, console)
    sql = json.loads((superset_cli.state_dir(cfg) / "lake_views.json").read_text())
    assert any("delta_scan(" in s for s in sql if s.startswith('CREATE OR REPLACE VIEW main."flows"'))
    try:
        yield table
    finally:
        shutil.rmtree(table / "_delta_log")
        shutil.rmtree(table / f"date={RACE_DAY}", ignore_errors=True)
        # the views rewritten, flows' back on the Parquet files (the test lake's attacks and
        # mitigations are Delta tables of their own and stay on delta_scan)
        rewritten = superset_cli.refresh_views(cfg)
        assert rewritten is not None and "flows" not in rewritten, rewritten


@pytest.mark.integration
def test_chart_data_and_sql_lab_read_the_delta_table_as_the_parquet_lake(api, superset, cfg, figure):
    table = cfg.lake / "flows"
    assert not (table / "_delta_log").exists()
    assert superset_cli.refresh_views(cfg) is None  # the provisioned views glob the Parquet files
    per_day = {d.isoformat(): Readers(api, d.isoformat()) for d in DAYS}
    parquet = {d: (r.chart_data(), r.sql_lab()) for d, r in per_day.items()}
    for day, (chart, lab) in parquet.items():
        assert chart == lab and sum(n for _, n, _ in chart) > 0, day
    try:
        delta.convert_in_place(table, PARTS)
        hooks.after_lake_change(cfg, Console(stderr=True))
        on_delta = {d: (r.chart_data(), r.sql_lab()) for d, r in per_day.items()}
        assert on_delta == parquet
        independent = DeltaTable(str(table)).to_pyarrow_table(columns=["date", "exporter", "bytes"])
        for day, (chart, _) in on_delta.items():
            assert chart == _by_exporter(independent.filter(pc.equal(independent.column("date"), day))), day
        figure("Superset on the Delta flows table: " + ", ".join(
            f"{d} {sum(n for _, n, _ in c)} flows" for d, (c, _) in on_delta.items())
            + " (chart data = SQL Lab = Parquet views)")
    finally:
        shutil.rmtree(table / "_delta_log", ignore_errors=True)
        superset_cli.refresh_views(cfg)


@pytest.mark.integration
def test_chart_data_and_sql_lab_stay_exact_while_hours_are_rewritten(api, superset, cfg, delta_flows, figure):
    table = delta_flows
    # the race day: four hours of demo rows, appended as one micro-batch with its transaction
    first_day = DAYS[0].isoformat()
    rows = DeltaTable(str(table)).to_pyarrow_table(filters=[("date", "=", first_day), ("hour", "in", [0, 1, 2, 3])])
    rows = rows.set_column(rows.schema.get_field_index("date"), "date", pa.array([RACE_DAY] * rows.num_rows))
    assert delta.append_batch(table, rows, "superset-delta-test", 0)
    expected = _by_exporter(rows)
    readers = Readers(api, RACE_DAY)
    assert readers.chart_data() == expected and readers.sql_lab() == expected
    log = cfg.path("log", "superset.log")
    reruns_before = log.read_text(errors="replace").count(RERUN_LINE)
    hours = sorted(set(rows.column("hour").to_pylist()))
    counts: dict[str, list] = {"chart data": [], "SQL Lab": []}
    errors: list[str] = []
    stop = threading.Event()

    def loop(name, read):
        while not stop.is_set():
            try:
                counts[name].append(read())
            except Exception as exc:  # noqa: BLE001 - any failure is the defect
                errors.append(f"{name}: {str(exc)[:300]}")

    threads = [threading.Thread(target=loop, args=("chart data", readers.chart_data)),
               threading.Thread(target=loop, args=("SQL Lab", readers.sql_lab))]
    for th in threads:
        th.start()
    commits = 0
    try:
        deadline = time.monotonic() + 150  # a bound on the loop, not a timing assertion
        while time.monotonic() < deadline and (commits < 16 or min(map(len, counts.values())) < 10):
            hour = hours[commits % len(hours)]
            part = {"date": RACE_DAY, "hour": hour}
            snap = DeltaTable(str(table))
            got = snap.to_pyarrow_table(filters=[("date", "=", RACE_DAY), ("hour", "=", hour)])
            got = got.sort_by([("exporter", "ascending"), ("dst_port", "ascending"), ("time_start", "ascending")])
            if commits % 2:  # the compactor's way: its own file in the hour's folder, committed
                folder = table / f"date={RACE_DAY}" / f"hour={hour}"
                path = folder / f"c{commits:06d}-000.parquet"
                pq.write_table(got.drop_columns(["date", "hour"]), path, compression="zstd")
                delta.commit_partition_files(table, [path], part, snap.schema().to_arrow(), ["date", "hour"],
                                             read_version=snap.version())
            else:  # delta-rs writes the hour anew
                delta.replace_partition(table, got, part, read_version=snap.version())
            commits += 1
    finally:
        stop.set()
        for th in threads:
            th.join()
    reruns = log.read_text(errors="replace").count(RERUN_LINE) - reruns_before
    figure(f"Delta race: {commits} hour rewrites committed; "
           + ", ".join(f"{k} {len(v)} counts" for k, v in counts.items())
           + f"; {reruns} statements rerun; {len(errors)} failed")
    assert not errors, errors[:3]
    assert commits >= 16 and min(map(len, counts.values())) >= 10
    wrong = {k: [c for c in v if c != expected] for k, v in counts.items()}
    assert not any(wrong.values()), f"readers saw {wrong} instead of {expected}"
    assert reruns == 0
    assert DeltaTable(str(table)).version() >= commits + 1
