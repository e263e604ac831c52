"""`flowlake query --as-of VERSION|TIME` (issue 38's time travel): lake/flows read as the
Delta table was at a version, or at the newest version committed at or before a time, on
both engines, the fast path (no click) included. A table of two commits: the day made a
table in place (version 0), then a late import of hour 03's rows again (version 1)."""
from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_query_fast import PROBE

from flowlake.base import delta

ROOT = Path(__file__).resolve().parents[2]
DAY = dt.date(2026, 11, 20)
STATS = ["query", "any", "-s", "proto/flows", "-n", "0", "--format", "json"]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_query", ROOT / "bench" / "query.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _late_import(flows: Path, app_version: int) -> int:
    """Append hour 03's rows again as one ingest batch (one commit); returns the rows."""
    f = sorted((flows / f"date={DAY}" / "hour=03").glob("*.parquet"))[0]
    rows = pq.ParquetFile(f).read()
    rows = rows.append_column("date", pa.array([DAY.isoformat()] * rows.num_rows)).append_column(
        "hour", pa.array([3] * rows.num_rows, pa.int32()))
    assert delta.append_batch(flows, rows, "test-late-import", app_version, partition_by=["date", "hour"])
    return rows.num_rows


@pytest.fixture(scope="module")
def homes(tmp_path_factory, cfg) -> dict:
    """{"plain": the day as a Parquet lake, "table": the same day made a Delta table, then
    a late import, "late": the rows it added, "times": [commit time of version 0, 1]}."""
    bench = _bench()
    plain = tmp_path_factory.mktemp("asof-parquet")
    bench.write_lake(bench.synth(8_000, seed=11), plain)
    table = tmp_path_factory.mktemp("asof-delta")
    shutil.copytree(plain / "lake", table / "lake")
    flows = table / "lake" / "flows"
    out = delta.convert_in_place(flows, [("date", "string"), ("hour", "integer")])
    assert out["converted"] and out["rows"] == 8_000, out
    time.sleep(2.2)  # a whole second between the commits: a time between them at second precision
    late = _late_import(flows, 0)
    times = {h["version"]: h["timestamp"] / 1000 for h in deltalake.DeltaTable(str(flows)).history()}
    assert sorted(times) == [0, 1] and times[1] - times[0] >= 2
    return {"plain": plain, "table": table, "late": late, "times": [times[0], times[1]]}


def _env(home: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWLAKE_")}
    return {**env, "FLOWLAKE_HOME": str(home), "FLOWLAKE_QUERY_SERVER": "false", **extra}


def _query(home: Path, args: list[str], engine: str = "local", **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=600,
                          env=_env(home, FLOWLAKE_QUERY_ENGINE=engine, **env))


def _flows(out: subprocess.CompletedProcess) -> int:
    assert out.returncode == 0, out.stderr[-3000:]
    (stat,) = json.loads(out.stdout).values()
    return sum(r["flows"] for r in stat)


def _between(homes, zone: str) -> str:
    t0, t1 = homes["times"]
    mid = dt.datetime.fromtimestamp((t0 + t1) / 2, dt.UTC)
    if zone == "Z":
        return mid.strftime("%Y-%m-%dT%H:%M:%SZ")
    if zone == "+01:00":
        return (mid + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S+01:00")
    return mid.strftime("%Y-%m-%dT%H:%M:%S")  # UTC, as --from/--to


def test_as_of_reads_the_version_asked_for_local_engine(homes):
    table, plain = homes["table"], homes["plain"]
    first = _query(plain, STATS)
    now = _query(table, STATS)
    assert _flows(now) == _flows(first) + homes["late"] and homes["late"] > 100
    # the fast path answered (no click), deltalake loaded for the Delta table only
    assert "'click'" not in now.stderr.strip().splitlines()[-1], now.stderr
    assert "lake/flows read at version" not in now.stderr  # no --as-of: nothing more said
    for as_of, version in [("0", 0), ("1", 1), (_between(homes, ""), 0), (_between(homes, "Z"), 0),
                           (_between(homes, "+01:00"), 0)]:
        out = _query(table, [*STATS, "--as-of", as_of])
        assert out.stdout == (first if version == 0 else now).stdout, (as_of, out.stderr)
        said = [line for line in out.stderr.splitlines() if line.startswith("lake/flows read at version")]
        assert len(said) == 1 and said[0].startswith(f"lake/flows read at version {version} (--as-of "), \
            (as_of, out.stderr)
        assert "'click'" not in out.stderr.strip().splitlines()[-1], out.stderr  # the fast path answered
    # through click (fast start off): the same answer, the same line
    slow = _query(table, [*STATS, "--as-of", "0"], FLOWLAKE_QUERY_FAST_START="false")
    assert slow.stdout == first.stdout and "lake/flows read at version 0 (--as-of 0)" in slow.stderr
    # now (after both commits) is the newest version
    later = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert _query(table, [*STATS, "--as-of", later]).stdout == now.stdout
    # a window: --from/--to with --as-of (hour 03 is where the versions differ)
    window = [*STATS, "--from", f"{DAY}T03:00", "--to", f"{DAY}T04:00"]
    assert _flows(_query(table, [*window, "--as-of", "0"])) == _flows(_query(plain, window))
    assert _flows(_query(table, window)) == _flows(_query(plain, window)) + homes["late"]


def test_as_of_errors_name_the_input(homes, tmp_path):
    table, plain = homes["table"], homes["plain"]
    out = _query(plain, [*STATS, "--as-of", "0"])
    assert out.returncode == 2 and out.stdout == ""
    assert "lake/flows is a Parquet lake" in out.stderr and "flowlake lake migrate" in out.stderr, out.stderr
    out = _query(table, [*STATS, "--as-of", "7"])
    assert out.returncode == 2 and "--as-of" in out.stderr, out.stderr
    assert "has no version 7: its versions are 0 to 1" in out.stderr, out.stderr
    t0 = dt.datetime.fromtimestamp(homes["times"][0], dt.UTC)
    before = (t0 - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    out = _query(table, [*STATS, "--as-of", before])
    assert out.returncode == 2 and "has no version at or before" in out.stderr, out.stderr
    assert f"its oldest version 0 was committed {t0:%Y-%m-%dT%H:%M:%S}" in out.stderr, out.stderr
    out = _query(table, [*STATS, "--as-of", "yesterday"])
    assert out.returncode == 2 and "'yesterday' is neither a table version" in out.stderr, out.stderr
    # versions whose files VACUUM removed: hour 03 deleted (version 2), its files vacuumed
    copy = tmp_path / "vacuumed"
    shutil.copytree(table / "lake", copy / "lake")
    flows = copy / "lake" / "flows"
    assert delta.delete_partitions(flows, [{"date": DAY.isoformat(), "hour": 3}]) > 0
    assert delta.vacuum(flows, 0)
    for v in ("0", "1"):
        out = _query(copy, [*STATS, "--as-of", v])
        assert out.returncode == 2, out.stderr
        assert f"version {v} is no longer readable" in out.stderr and "the oldest version available is 2" in out.stderr
    out = _query(copy, [*STATS, "--as-of", "2"])
    assert _flows(out) == _flows(_query(plain, STATS)) - _flows(_query(plain, [*STATS, "--from", f"{DAY}T03:00",
                                                                                 "--to", f"{DAY}T04:00"]))


@pytest.mark.integration
def test_as_of_spark_engine(homes):
    table, plain = homes["table"], homes["plain"]
    first = _query(plain, STATS, engine="local")
    now = _query(table, STATS, engine="local")
    for as_of, want in [("0", first), (_between(homes, "Z"), first), ("1", now)]:
        out = _query(table, [*STATS, "--as-of", as_of], engine="spark")
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout == want.stdout, (as_of, out.stderr[-2000:])
        assert "lake/flows read at version" in out.stderr
    # a window at version 0 without the late rows, and the Parquet lake refused
    window = [*STATS, "--from", f"{DAY}T03:00", "--to", f"{DAY}T04:00", "--as-of", "0"]
    assert _query(table, window, engine="spark").stdout == _query(table, window).stdout
    out = _query(plain, [*STATS, "--as-of", "0"], engine="spark")
    assert out.returncode == 2 and "lake/flows is a Parquet lake" in out.stderr, out.stderr[-2000:]
