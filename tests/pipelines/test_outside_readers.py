"""Issue 38's proof: plain outside readers of lake/flows, a DuckDB with the delta
extension (loaded as flowlake/base/delta.py does, in a process of its own) and the
`deltalake` package, loop while the stack's own compactor (`hour_close.run`, the pass the
compactor service runs) compacts every hour AND retention (`flowlake retention`, the pass
the retention service runs) deletes the expired days. Every read is exact (the counts per
date of the version it read), none fails, and once a reader saw the DELETE it never sees
the deleted days again.

tests/base/test_delta.py has the same readers against delta.py's primitives; this one runs
the stack's code paths on a lake the ingest's writer made (test_compaction.Writer)."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from test_compaction import Writer, batch_table

from flowlake.base import config
from flowlake.pipelines import hour_close

pytestmark = pytest.mark.slow  # about a minute: the compactor's passes over 16 hours
FLOWLAKE = str(Path(sys.executable).with_name("flowlake"))
TODAY = dt.datetime.now(dt.UTC).date()
# days before today: two expire at [retention] flows_days = 3, two stay
AGES = (9, 5, 2, 1)
KEEP = 3
HOURS = [0, 1, 2, 3]
ROWS = 300  # per batch and hour

DUCK_LOOP = """
import json, sys, time
from pathlib import Path
import duckdb
from flowlake.base import delta
table, stop = sys.argv[1], Path(sys.argv[2])
con = duckdb.connect()
delta.duckdb_load_delta(con)
while not stop.exists():
    t0 = time.time()
    try:
        rows = con.execute(f"SELECT CAST(date AS VARCHAR), count(*) FROM delta_scan('{table}') GROUP BY 1").fetchall()
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        continue
    print(json.dumps({"t0": t0, "t1": time.time(), "by": dict(rows)}), flush=True)
con.close()
"""


def day(age: int) -> str:
    return (TODAY - dt.timedelta(days=age)).isoformat()


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWLAKE_HOME", str(tmp_path))
    monkeypatch.setenv("FLOWLAKE_RETENTION_FLOWS_DAYS", str(KEEP))
    monkeypatch.setenv("FLOWLAKE_COMPACTION_ZSTD_LEVEL", "3")  # the compactor's own code, cheaper files
    config.reset()
    yield config.get()
    config.reset()


def _by_date(table: pa.Table) -> dict[str, int]:
    return {str(r["date"]): r["date_count"] for r in table.group_by("date").aggregate([("date", "count")]).to_pylist()}


def test_outside_readers_are_exact_while_the_compactor_compacts_and_retention_deletes(home):
    cfg = home
    w = Writer(cfg)
    want: dict[str, int] = {}
    b = 0
    for age in AGES:  # three micro-batches per day, each into every hour: 3 files an hour to compact
        t0 = int(dt.datetime.fromisoformat(day(age)).replace(tzinfo=dt.UTC).timestamp() * 1000)
        for _ in range(3):
            assert w.publish(b, batch_table(b, HOURS, ROWS, t0), day(age))
            want[day(age)] = want.get(day(age), 0) + ROWS * len(HOURS)
            b += 1
    table = w.table_dir
    loaded = deltalake.DeltaTable(str(table)).version()
    kept = {d: n for d, n in want.items() if d >= day(KEEP)}
    assert len(kept) == 2 and len(want) == 4

    stop = threading.Event()
    stop_file = cfg.path("stop-readers")
    duck: list[dict] = []
    lake: list[tuple[int, dict]] = []  # deltalake: (version read, counts per date)
    errors: list[str] = []

    def duck_reader():  # a plain DuckDB in a process of its own, as an analyst's would be
        proc = subprocess.run([sys.executable, "-c", DUCK_LOOP, str(table), str(stop_file)],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode:
            errors.append(f"duckdb: exit {proc.returncode}: {proc.stderr[-2000:]}")
        for line in proc.stdout.splitlines():
            got = json.loads(line)
            (errors.append(f"duckdb: {got['error']}") if "error" in got else duck.append(got))

    def deltalake_reader():
        while not stop.is_set():
            try:
                t = deltalake.DeltaTable(str(table))
                lake.append((t.version(), _by_date(t.to_pyarrow_table(columns=["date"]))))
            except Exception as exc:  # noqa: BLE001 - recorded: the test fails on any
                errors.append(f"deltalake: {type(exc).__name__}: {exc}")

    passes: list[list[dict]] = []
    retention: list[subprocess.CompletedProcess] = []

    def compactor():  # the compactor service's pass, a day at a time as hours close
        for age in AGES:
            passes.append(hour_close.run(cfg, date=day(age), settle=False, rollups=False))

    def retention_service():  # the retention service's pass, while the compactor works
        time.sleep(0.5)
        env = {**os.environ, "FLOWLAKE_HOME": str(cfg.home_dir), "FLOWLAKE_KAFKA_PORT": "1"}
        retention.append(subprocess.run([FLOWLAKE, "retention", "--json"], env=env, capture_output=True,
                                        text=True, timeout=300))

    readers = [threading.Thread(target=duck_reader), threading.Thread(target=deltalake_reader)]
    for th in readers:
        th.start()
    try:
        deadline = time.time() + 60
        while not (duck and lake) and not errors and time.time() < deadline:
            time.sleep(0.1)  # both readers read the loaded table before anything changes it
        writers = [threading.Thread(target=compactor), threading.Thread(target=retention_service)]
        for th in writers:
            th.start()
        for th in writers:
            th.join()
        time.sleep(1.0)  # a few reads of the final version
    finally:
        stop.set()
        stop_file.touch()
        for th in readers:
            th.join()

    assert not errors, errors[:5]
    assert retention and retention[0].returncode == 0, retention[0].stderr[-2000:] if retention else "no pass"
    # the stack did both: every expired day deleted in one commit, and the compactor committed hours
    final = deltalake.DeltaTable(str(table))
    ops = [(h["version"], h.get("operation")) for h in final.history() if h["version"] > loaded]
    deletes = [v for v, op in ops if op == "DELETE"]
    assert len(deletes) == 1, ops
    compacted = sum(len(p) for p in passes)
    # at least the kept days' hours (the expired ones may be deleted first)
    assert compacted >= len(kept) * len(HOURS), passes
    assert _by_date(final.to_pyarrow_table(columns=["date"])) == kept
    # every read exact: per version, the counts it holds
    expect = lambda v: want if v < deletes[0] else kept  # noqa: E731
    wrong = [(v, got) for v, got in lake if got != expect(v)]
    assert not wrong, wrong[:3]
    versions = {v for v, _ in lake}
    assert len(versions) > 2, f"deltalake read only versions {sorted(versions)}: no read met the passes"
    bad = [r for r in duck if r["by"] not in (want, kept)]
    assert not bad, bad[:3]
    after = [i for i, r in enumerate(duck) if r["by"] == kept]
    assert after and all(r["by"] == kept for r in duck[after[0]:])  # never the deleted days again
    assert any(r["by"] == want for r in duck)
    print(f"deltalake: {len(lake)} reads of {len(versions)} versions; duckdb: {len(duck)} reads; "
          f"{compacted} hours compacted, DELETE at version {deletes[0]}, final version {final.version()}")
