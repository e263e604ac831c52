"""`flowlake lake migrate` (issue 38): a lake of the older Parquet layout becomes a Delta
table in place, counts equal before and after, the ingest's last batch recorded, the old
layer's hidden folders and done-markers gone, safe to rerun; refused while a batch is
pending or a compaction pass runs; `flowlake up`'s check names the command."""
from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import deltalake
import duckdb
import pytest

from flowlake.base import config, delta
from flowlake.lake_cli import UPGRADE_HINT, check_up
from flowlake.pipelines import lake_migrate

ROOT = Path(__file__).resolve().parents[2]
FLOWLAKE = str(Path(sys.executable).with_name("flowlake"))
FLOWS = 9_000


def _bench():
    spec = importlib.util.spec_from_file_location("bench_query", ROOT / "bench" / "query.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def template(tmp_path_factory, cfg) -> Path:
    bench = _bench()
    home = tmp_path_factory.mktemp("migrate-template")
    bench.write_lake(bench.synth(FLOWS, seed=3), home)
    return home


def _env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWLAKE_")}
    return {**env, "FLOWLAKE_HOME": str(home)}


def _cfg(home: Path):
    return config.load(env=_env(home))


def _migrate(home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([FLOWLAKE, "lake", "migrate"], capture_output=True, text=True, env=_env(home), timeout=300)


def _glob_counts(flows: Path) -> dict[str, int]:
    con = duckdb.connect()
    try:
        return dict(con.execute(f"SELECT CAST(date AS VARCHAR), count(*) FROM read_parquet('{flows}/*/*/*.parquet', "
                                "hive_partitioning = true) GROUP BY 1").fetchall())
    finally:
        con.close()


@pytest.fixture
def home(template, tmp_path) -> Path:
    """A copy of the template lake with the old layer around it: done-markers of batches
    0-4, a staging folder, a retired hour, a dead reader's pins."""
    home = tmp_path / "home"
    shutil.copytree(template / "lake", home / "lake")
    cfg = _cfg(home)
    state = cfg.path("state", "ingest", "flows")
    state.mkdir(parents=True)
    for b in range(5):
        (state / f"{b:012d}.done").write_text(json.dumps({"rows": 10, "files": 1}))
    lake = home / "lake"
    (lake / ".staging" / "flows" / "b000000000005").mkdir(parents=True)
    (lake / ".retired" / "flows" / "0001-2026-11-20-03-abc").mkdir(parents=True)
    (lake / ".snapshots" / "999999999-deadbeef0000" / "g1").mkdir(parents=True)  # no such pid
    return home


def test_migrate_converts_in_place_counts_equal_and_reruns(home):
    flows = home / "lake" / "flows"
    before = _glob_counts(flows)
    assert sum(before.values()) == FLOWS
    cfg = _cfg(home)
    assert lake_migrate.needs_migration(cfg)
    with pytest.raises(RuntimeError, match="run `flowlake lake migrate`") as err:
        check_up(cfg)
    assert str(err.value) == UPGRADE_HINT
    files = sorted(p.relative_to(flows) for p in flows.rglob("*.parquet"))

    got = _migrate(home)
    assert got.returncode == 0, got.stderr
    assert f"{FLOWS:,} rows" in got.stdout and "converted (version 0" in got.stdout, got.stdout
    for d, n in before.items():
        assert f"date={d}: {n:,} rows" in got.stdout
    # a table now, same files in place, same rows per date through Delta
    assert (flows / "_delta_log").is_dir() and not lake_migrate.needs_migration(cfg)
    check_up(cfg)  # no longer asks for a migration
    assert sorted(p.relative_to(flows) for p in flows.rglob("*.parquet")) == files
    con = duckdb.connect()
    try:
        delta.duckdb_load_delta(con)
        after = dict(con.execute(f"SELECT date, count(*) FROM delta_scan('{flows}') GROUP BY 1").fetchall())
    finally:
        con.close()
    assert after == before
    table = deltalake.DeltaTable(str(flows))
    assert table.transaction_version("ingest-flows") == 4  # the last done batch: a replay of it is a no-op
    assert table.metadata().configuration.get("delta.enableDeletionVectors") == "false"
    # the log's bounds ([lake]) are in the first commit: no extra version
    conf, bounds = table.metadata().configuration, cfg.data["lake"]
    assert conf.get("delta.checkpointInterval") == str(bounds["checkpoint_interval"])
    assert conf.get("delta.logRetentionDuration") == f"interval {bounds['log_retention_hours']} hours"
    # the old layer went
    lake = home / "lake"
    assert not (lake / ".staging" / "flows").exists() and not (lake / ".retired" / "flows").exists()
    assert not (lake / ".snapshots" / "999999999-deadbeef0000").exists()
    assert not list(cfg.path("state", "ingest", "flows").glob("*.done"))

    again = _migrate(home)
    assert again.returncode == 0, again.stderr
    assert "already a Delta table" in again.stdout and "version 0" in again.stdout
    assert deltalake.DeltaTable(str(flows)).version() == 0


def test_migrate_rerun_refuses_files_added_the_old_way(home):
    assert _migrate(home).returncode == 0
    flows = home / "lake" / "flows"
    hour = next(flows.glob("date=*/hour=*"))
    shutil.copy(next(hour.glob("*.parquet")), hour / "b000000000009-00000.zstd.parquet")
    got = _migrate(home)
    assert got.returncode != 0
    assert "files were added without a commit" in got.stderr and hour.parent.name in got.stderr, got.stderr


def test_migrate_refuses_a_pending_batch_and_a_running_compaction(home):
    cfg = _cfg(home)
    pending = cfg.path("state", "ingest", "flows") / "000000000005.pending"
    pending.write_text("[]")
    got = _migrate(home)
    assert got.returncode != 0 and "batch 000000000005 died" in got.stderr and "flowlake up" in got.stderr
    assert not (home / "lake" / "flows" / "_delta_log").exists()
    pending.unlink()
    lock = cfg.path("run", "compaction.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        got = _migrate(home)
    finally:
        os.close(fd)
    assert got.returncode != 0 and "compaction" in got.stderr and "flowlake down" in got.stderr, got.stderr
    assert not (home / "lake" / "flows" / "_delta_log").exists()
    assert lake_migrate.needs_migration(cfg)


def test_migrate_refuses_parquet_under_hidden_paths_in_the_table(home):
    hour = next((home / "lake" / "flows").glob("date=*/hour=*"))
    hidden = hour / ".tmp" / "x.parquet"
    hidden.parent.mkdir()
    shutil.copy(next(hour.glob("*.parquet")), hidden)
    got = _migrate(home)
    assert got.returncode != 0 and "hidden paths" in got.stderr and str(hidden) in got.stderr, got.stderr
    assert not (home / "lake" / "flows" / "_delta_log").exists()


def test_a_home_without_flows_needs_no_migration(tmp_path):
    cfg = _cfg(tmp_path)
    assert not lake_migrate.needs_migration(cfg)
    got = _migrate(tmp_path)
    assert got.returncode == 0 and "no data, nothing to migrate" in got.stdout, got.stderr
