"""Files of lake/flows that a commit replaced (hours a compaction rewrote) and readers'
pins (lake/.snapshots, still taken for the Parquet tables) as retention tiers: counted in
`flowlake retention` and `flowlake status`, the replaced files vacuumed after [compaction]
retired_grace_minutes (whole hours) or by the disk guard first, at any age. The older
table version stays readable until then. Real compaction, real DuckDB counts, a real
small filesystem for the guard."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import smallfs  # noqa: E402
from test_compaction import DAY, _lake_with_hours, _swap_all, home, lake_rows  # noqa: E402,F401
from test_retention import cli, day, put  # noqa: E402

from flowlake.base import delta  # noqa: E402
from flowlake.pipelines import lake_snapshot  # noqa: E402


def _count(files) -> int:
    import duckdb

    from flowlake.pipelines.duck import sql_list

    return duckdb.sql(f"SELECT count(*) FROM read_parquet({sql_list(list(files))})").fetchone()[0]


def _tier(doc: dict, name: str) -> dict:
    return next(t for t in doc["tiers"] if t["tier"] == name)


def _dead_snapshot(lake: Path) -> Path:
    """What a reader killed before close() leaves: its snapshot, under a pid that has exited."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    snap = lake_snapshot.Snapshot(lake)
    snap.path = lake_snapshot.root(lake) / f"{proc.pid}-deadbeef0000"
    put(lake / "reports" / "x" / f"date={DAY}" / "p.parquet")
    snap.pin(lake / "reports" / "x" / f"date={DAY}")
    return snap.path


def test_replaced_files_and_snapshots_are_counted_and_expire_after_the_grace(home):
    cfg = home
    w, expected, _ = _lake_with_hours(cfg)
    table = w.table_dir
    v0, old_files = delta.version_files(table)
    assert _swap_all(cfg, w) == 4
    dead = _dead_snapshot(cfg.lake)
    live = lake_snapshot.Snapshot(cfg.lake)
    assert live.files(cfg.lake / "reports" / "x" / f"date={DAY}")
    replaced_bytes = sum(Path(f).stat().st_size for f in old_files)

    # Within the grace: counted, only the dead reader's snapshot goes.
    dry = json.loads(cli(cfg.home_dir, "retention", "--dry-run", "--json").stdout)
    r, s = _tier(dry, "retired"), _tier(dry, "snapshots")
    assert (r["units"], r["expire_units"], r["limit"]) == (1, 0, "15 min after a commit replaced them")
    assert r["bytes"] >= replaced_bytes > 0  # the replaced files, and the uncommitted batch's
    assert (s["units"], s["expire_units"]) == (2, 1)
    assert [u["path"] for u in dry["remove"]] == [str(dead)]
    status = json.loads(cli(cfg.home_dir, "status", "--json").stdout)["retention"]
    assert _tier(status, "retired")["units"] == 1 and _tier(status, "snapshots")["units"] == 2

    # The grace over (env override, as for every key): the replaced files and the dead
    # reader's snapshot go; the live reader's snapshot and the table's rows stay exact.
    env = {"FLOWLAKE_COMPACTION_RETIRED_GRACE_MINUTES": "0"}
    dry = json.loads(cli(cfg.home_dir, "retention", "--dry-run", "--json", env=env).stdout)
    assert sorted(u["path"] for u in dry["remove"]) == sorted([str(dead), str(table)])
    assert sum(Path(f).exists() for f in old_files) == len(old_files)  # the older version reads whole
    assert _count(old_files) == expected
    done = json.loads(cli(cfg.home_dir, "retention", "--json", env=env).stdout)
    assert done["result"]["removed"]["retired"]["units"] == 1
    assert done["result"]["removed"]["snapshots"]["units"] == 1
    assert not any(Path(f).exists() for f in old_files) and not dead.exists()
    assert live.path.exists() and len(lake_rows(cfg)) == expected
    live.close()
    after = json.loads(cli(cfg.home_dir, "retention", "--dry-run", "--json", env=env).stdout)
    assert _tier(after, "retired")["units"] == 0 and _tier(after, "snapshots")["units"] == 0
    assert v0 == 8  # the table created, then 8 batch commits


@pytest.mark.root
def test_disk_guard_vacuums_replaced_files_first(tmp_path, monkeypatch):
    """Above the high-water mark, files a commit replaced (still in their grace) go before
    anything else the guard may take (a raw flow day that has rollups stays when they are
    enough)."""
    from flowlake.base import config

    with smallfs.tmpfs(tmp_path / "home", 32) as home:
        monkeypatch.setenv("FLOWLAKE_HOME", str(home))
        config.reset()
        cfg = config.get()
        try:
            w, expected, _ = _lake_with_hours(cfg)
            _, old_files = delta.version_files(w.table_dir)
            assert _swap_all(cfg, w) == 4
        finally:
            config.reset()
        env = {"FLOWLAKE_RETENTION_DISK_HIGH_WATER_PCT": "60", "FLOWLAKE_RETENTION_DISK_FLOOR_PCT": "10"}
        for res in ("5m", "1h"):
            put(home / "lake" / "rollups" / res / f"date={day(4)}" / "p.parquet", 1000)
        used, total = smallfs.usage(home)
        smallfs.fill_to(home, home / "ballast", 100 * (0.60 * total + (64 << 10)) / total)
        dry = json.loads(cli(home, "retention", "--dry-run", "--json", env=env).stdout)
        assert [u["path"] for u in dry["remove"]] == [str(w.table_dir)], dry["remove"]
        assert {u["why"] for u in dry["guard"]} == {"disk above 60% used: replaced by a commit, waiting for VACUUM"}
        json.loads(cli(home, "retention", "--json", env=env).stdout)
        assert not any(Path(f).exists() for f in old_files)
        monkeypatch.setenv("FLOWLAKE_HOME", str(home))
        config.reset()
        try:
            assert len(lake_rows(config.get())) == expected
        finally:
            config.reset()
