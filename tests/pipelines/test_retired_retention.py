"""lake/.retired (hours swapped out by compaction) and lake/.snapshots (readers' hard links)
as retention tiers: counted in `flowlake retention` and `flowlake status`, deleted after
[compaction] retired_grace_minutes (or by the disk guard first, at any age) but never while
a reader in the middle of pinning an hour could still need them. Real compaction, real
DuckDB counts, a real small filesystem for the guard."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import smallfs  # noqa: E402
from test_compaction import DAY, _lake_with_hours, _swap_all, home  # noqa: E402,F401
from test_retention import cli, day, put  # noqa: E402


def _count(files) -> int:
    import duckdb

    from flowlake.pipelines.duck import sql_list

    return duckdb.sql(f"SELECT count(*) FROM read_parquet({sql_list(list(files))})").fetchone()[0]


def _tier(doc: dict, name: str) -> dict:
    return next(t for t in doc["tiers"] if t["tier"] == name)


def _dead_snapshot(lake: Path) -> Path:
    """What a reader killed before close() leaves: its snapshot, under a pid that has exited."""
    from flowlake.pipelines import lake_snapshot

    proc = subprocess.Popen(["true"])
    proc.wait()
    snap = lake_snapshot.Snapshot(lake)
    snap.path = lake_snapshot.root(lake) / f"{proc.pid}-deadbeef0000"
    snap.pin(lake / "flows" / f"date={DAY}")
    return snap.path


def test_retired_and_snapshots_are_counted_and_expire_after_the_grace(home):
    from flowlake.pipelines import lake_snapshot

    cfg = home
    w, expected, _ = _lake_with_hours(cfg)
    assert _swap_all(cfg, w) == 4
    dead = _dead_snapshot(cfg.lake)
    live = lake_snapshot.Snapshot(cfg.lake)
    live_files = live.files(cfg.lake / "flows" / f"date={DAY}")
    retired = sorted((cfg.lake / ".retired" / "flows").iterdir())
    assert len(retired) == 4
    # what deleting them frees: the old batch files (not the unfinished one carried over)
    in_lake = {p.name for p in (cfg.lake / "flows").rglob("*.parquet")}
    old_bytes = sum(p.stat().st_size for d in retired for p in d.iterdir() if p.name not in in_lake)

    # Within the grace: counted, only the dead reader's snapshot goes.
    dry = json.loads(cli(cfg.home_dir, "retention", "--dry-run", "--json").stdout)
    r, s = _tier(dry, "retired"), _tier(dry, "snapshots")
    assert (r["units"], r["expire_units"], r["limit"]) == (4, 0, "15 min after the swap")
    assert r["bytes"] >= old_bytes > 0
    assert (s["units"], s["expire_units"]) == (2, 1)
    assert [u["path"] for u in dry["remove"]] == [str(dead)]
    doc = json.loads(cli(cfg.home_dir, "status", "--json").stdout)
    status = doc["retention"]
    assert _tier(status, "retired")["units"] == 4 and _tier(status, "snapshots")["units"] == 2
    assert doc["counts"]["compaction"]["retired"]["folders"] == 4
    assert _tier(status, "retired")["bytes"] == r["bytes"]
    assert "retired" in cli(cfg.home_dir, "status").stdout

    # The grace over (env override, as for every key): the retired folders and the dead
    # reader's snapshot go; the live reader's snapshot and the lake's rows stay exact.
    env = {"FLOWLAKE_COMPACTION_RETIRED_GRACE_MINUTES": "0"}
    dry = json.loads(cli(cfg.home_dir, "retention", "--dry-run", "--json", env=env).stdout)
    assert sorted(u["path"] for u in dry["remove"]) == sorted([str(dead), *map(str, retired)])
    done = json.loads(cli(cfg.home_dir, "retention", "--json", env=env).stdout)
    assert done["result"]["removed"]["retired"] == {"units": 4, "bytes": r["bytes"]}
    assert done["result"]["removed"]["snapshots"]["units"] == 1
    assert not any((cfg.lake / ".retired" / "flows").iterdir()) and not dead.exists()
    assert live.path.exists() and _count(live_files) == expected
    assert _count(str(p) for p in (cfg.lake / "flows").rglob("*.parquet")) == expected
    live.close()
    assert json.loads(cli(cfg.home_dir, "status", "--json").stdout)["counts"]["compaction"]["retired"]["folders"] == 0
    after = json.loads(cli(cfg.home_dir, "retention", "--dry-run", "--json", env=env).stdout)
    assert _tier(after, "retired")["units"] == 0 and _tier(after, "snapshots")["units"] == 0


def test_a_reader_pinning_across_the_swap_keeps_its_retired_folder(home, monkeypatch):
    """A reader opens an hour folder, the hour is swapped and the old folder retired, then
    the reader links the files: from the retired folder. Retention with no grace at all
    runs meanwhile: it leaves the folder while the pin is in progress, so the reader counts
    exactly; the next pass deletes it."""
    from flowlake.base import config
    from flowlake.pipelines import lake_snapshot
    from flowlake.pipelines.retention import readers, run

    monkeypatch.setenv("FLOWLAKE_COMPACTION_RETIRED_GRACE_MINUTES", "0")
    monkeypatch.setenv("FLOWLAKE_KAFKA_PORT", "1")
    config.reset()
    cfg = config.get()
    w, _, _ = _lake_with_hours(cfg)
    hour = cfg.lake / "flows" / f"date={DAY}" / "hour=1"
    want = _count(str(p) for p in hour.glob("*.parquet"))
    opened, go_on = threading.Event(), threading.Event()
    link_dir = lake_snapshot.Snapshot._link_dir

    def paused_link(self, fd, dst, out):  # the reader has the hour open: stop here once
        if not opened.is_set():
            opened.set()
            go_on.wait(60)
        return link_dir(self, fd, dst, out)

    monkeypatch.setattr(lake_snapshot.Snapshot, "_link_dir", paused_link)
    reader = lake_snapshot.Snapshot(cfg.lake)
    got: list = []
    t_reader = threading.Thread(target=lambda: got.append(reader.files(hour)))
    t_reader.start()
    try:
        assert opened.wait(60)
        assert _swap_all(cfg, w) == 4  # hour=1's old folder, open in the reader, is now in lake/.retired
        monkeypatch.setattr(readers, "PIN_WAIT_S", 0.3)
        p = run.plan(cfg)
        assert len([u for u in p.expire if u.tier == "retired"]) == 4
        assert "retired" not in run.execute(cfg, p)["removed"]  # a pin in progress: they stay
        assert len(list((cfg.lake / ".retired" / "flows").iterdir())) == 4
    finally:
        go_on.set()
        t_reader.join()
    assert _count(got[0]) == want  # linked from the retired folder: every row, once
    assert run.execute(cfg, run.plan(cfg))["removed"]["retired"]["units"] == 4
    assert not any((cfg.lake / ".retired" / "flows").iterdir())
    assert _count(got[0]) == want  # the reader's links outlive the folder
    reader.close()


@pytest.mark.root
def test_disk_guard_takes_retired_folders_first(tmp_path):
    """Above the high-water mark, swapped-out hours still in their grace go before anything
    else the guard may take (a raw flow day that has rollups stays when they are enough)."""
    with smallfs.tmpfs(tmp_path / "home", 32) as home:
        lake = home / "lake"
        env = {"FLOWLAKE_RETENTION_DISK_HIGH_WATER_PCT": "60", "FLOWLAKE_RETENTION_DISK_FLOOR_PCT": "10"}
        put(lake / "flows" / f"date={day(4)}" / "hour=00" / "b.parquet", 3 << 20)
        for res in ("5m", "1h"):
            put(lake / "rollups" / res / f"date={day(4)}" / "p.parquet", 1000)
        stamp = int(time.time() * 1000)
        for i in range(2):  # swapped out a moment ago: well within the 15-minute grace
            put(lake / ".retired" / "flows" / f"{stamp + i:013d}-{day(0)}-0{i}-abcdef" / "b1-0.parquet", 2 << 20)
        used, total = smallfs.usage(home)
        smallfs.fill_to(home, home / "ballast", 100 * (0.60 * total + 3 * (1 << 20)) / total)
        dry = json.loads(cli(home, "retention", "--dry-run", "--json", env=env).stdout)
        went = [str(Path(u["path"]).relative_to(home)) for u in dry["remove"]]
        assert went == [f"lake/.retired/flows/{stamp:013d}-{day(0)}-00-abcdef",
                        f"lake/.retired/flows/{stamp + 1:013d}-{day(0)}-01-abcdef"], went
        assert {u["why"] for u in dry["guard"]} == {"disk above 60% used: swapped out by compaction, no reader needs it"}
        done = json.loads(cli(home, "retention", "--json", env=env).stdout)
        assert done["result"]["disk_after"]["level"] == "ok"
        assert not any((lake / ".retired" / "flows").iterdir())
        assert (lake / "flows" / f"date={day(4)}").exists()
