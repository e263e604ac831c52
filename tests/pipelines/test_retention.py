"""Retention without services: the keys, the age rule, what each lake tier expires, that
a dry run removes nothing and lists exactly what the real run removes, and the disk
guard's order on a real small filesystem (tmpfs). The running stack is
tests/hub/test_retention_stack.py."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import smallfs  # noqa: E402

FLOWLAKE = [sys.executable, "-m", "flowlake.cli"]
KEYS = ["flows_days", "quarantine_days", "spool_grace_hours", "kafka_hours", "kafka_bytes", "rollup_1m_days",
        "rollup_5m_days", "rollup_1h_days", "disk_high_water_pct", "disk_floor_pct", "interface_counters_days",
        "alerts_days", "attacks_days", "mitigations_days", "sflow_agent_health_days"]
TODAY = dt.datetime.now(dt.timezone.utc).date()


def day(n: int) -> str:
    return (TODAY - dt.timedelta(days=n)).isoformat()


def cli(home: Path, *args: str, env: dict | None = None, ok: bool = True) -> subprocess.CompletedProcess:
    e = {**os.environ, "FLOWLAKE_HOME": str(home), "FLOWLAKE_KAFKA_PORT": "1", **(env or {})}
    res = subprocess.run([*FLOWLAKE, *args], env=e, capture_output=True, text=True, timeout=120)
    if ok:
        assert res.returncode == 0, f"{args} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    return res


def tree(home: Path) -> set[str]:
    return {str(p.relative_to(home)) for p in home.rglob("*")}


def put(path: Path, size: int = 1000) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


def test_keys_env_overrides_and_the_removed_shipper_key(tmp_path):
    from flowlake.base import config

    cfg = config.load(env={})
    assert sorted(cfg.retention.as_dict()) == sorted(KEYS)
    assert (cfg.retention.rollup_1m_days, cfg.retention.rollup_5m_days, cfg.retention.rollup_1h_days) == (7, 90, 1825)
    env = {f"FLOWLAKE_RETENTION_{k.upper()}": str(i + 2) for i, k in enumerate(KEYS)}
    over = config.load(env=env)
    assert [getattr(over.retention, k) for k in KEYS] == [i + 2 for i in range(len(KEYS))]
    with pytest.raises(config.ConfigError, match="FLOWLAKE_RETENTION_FLOWS_DAYS"):
        config.load(env={"FLOWLAKE_RETENTION_FLOWS_DAYS": "a week"})
    old = tmp_path / "old.toml"
    old.write_text("[shipper]\ndelete_after_ship = true\n")
    with pytest.raises(config.ConfigError, match="delete_after_ship was removed.*spool_grace_hours"):
        config.load(old, env={})


def test_expired_dates_use_the_flows_own_day():
    from flowlake.base import config
    from flowlake.pipelines import retention

    cfg = config.load(env={"FLOWLAKE_RETENTION_FLOWS_DAYS": "3"})
    today = dt.date(2026, 11, 25)
    dates = ["2026-11-21", dt.date(2026, 11, 22), dt.datetime(2026, 11, 20, 23, 59), "date=2026-11-25"]
    # a day goes once all its flows are older than 3 days: 11-21 ended 4 days ago, 11-22 exactly 3
    assert retention.expired_dates(cfg, dates, today) == [dt.date(2026, 11, 20), dt.date(2026, 11, 21)]
    forever = config.load(env={"FLOWLAKE_RETENTION_FLOWS_DAYS": "0"})
    assert retention.expired_dates(forever, ["1990-01-01"], today) == []


def test_import_warns_before_it_starts_about_days_older_than_flows_days(tmp_path):
    from flowlake import importer as archive
    from flowlake.base import config

    cfg = config.load(env={"FLOWLAKE_RETENTION_FLOWS_DAYS": "3"})
    old = (TODAY - dt.timedelta(days=10)).strftime("%Y%m%d")
    put(tmp_path / old[:4] / old[4:6] / old[6:] / f"nfcapd.{old}1200")
    put(tmp_path / f"nfcapd.{TODAY:%Y%m%d}0005")
    put(tmp_path / "nfcapd.current.1234")  # nfcapd's open file: no date in its name
    days = archive.named_days([tmp_path])
    assert days == [TODAY - dt.timedelta(days=10), TODAY]
    (warning,) = archive.day_warnings(cfg, days)
    assert day(10) in warning and "flows_days=3" in warning and "rollups only" in warning
    assert archive.day_warnings(config.load(env={"FLOWLAKE_RETENTION_FLOWS_DAYS": "0"}), days) == []


def seed_lake(home: Path) -> None:
    lake = home / "lake"
    for n in (1, 3, 4, 9):
        put(lake / "flows" / f"date={day(n)}" / "hour=05" / "b1.zstd.parquet")
    for res, ages in {"1m": (1, 3), "5m": (3, 20), "1h": (20, 4000)}.items():
        for n in ages:
            put(lake / "rollups" / res / f"date={day(n)}" / "part-0.parquet")
    put(lake / "reports" / "top_talkers" / f"date={day(4000)}" / "part-0.parquet")  # reports are kept
    put(lake / "active" / f"date={day(500)}" / "part-0.parquet")
    q = lake / "quarantine"
    stamp = (TODAY - dt.timedelta(days=6)).strftime("%Y%m%d")
    put(q / "nfcapd" / f"nfcapd.{stamp}1200")
    put(q / "nfcapd" / f"nfcapd.{stamp}1200.reason", 60)
    put(q / "nfcapd" / f"nfcapd.{TODAY.strftime('%Y%m%d')}0000")
    put(q / "lake" / "flows" / f"date={day(8)}" / "hour=01" / "bad.parquet")
    old_msgs = put(q / "ingest" / "flows" / "b000000000007-00000.zstd.parquet")
    t = (dt.datetime.now() - dt.timedelta(days=9)).timestamp()  # undecodable: dated by quarantine time
    os.utime(old_msgs, (t, t))
    put(q / "ingest" / "flows" / "b000000000042-00000.zstd.parquet")


def test_dry_run_lists_exactly_what_the_run_removes(tmp_path):
    home = tmp_path / "home"
    seed_lake(home)
    put(home / "nfcapd" / "nfcapd.202611250000")  # no broker: the ledger cannot vouch for it
    env = {"FLOWLAKE_RETENTION_FLOWS_DAYS": "3", "FLOWLAKE_RETENTION_QUARANTINE_DAYS": "5",
           "FLOWLAKE_RETENTION_ROLLUP_1M_DAYS": "2", "FLOWLAKE_RETENTION_ROLLUP_5M_DAYS": "10",
           "FLOWLAKE_RETENTION_ROLLUP_1H_DAYS": "0", "FLOWLAKE_RETENTION_SPOOL_GRACE_HOURS": "0"}
    before = tree(home)
    dry = json.loads(cli(home, "retention", "--dry-run", "--json", env=env).stdout)
    assert tree(home) == before, "a dry run removed something"
    table = cli(home, "retention", "--dry-run", env=env).stdout
    assert "would remove 8 units" in table and "rollup_1m" in table and tree(home) == before

    want = {f"lake/flows/date={day(4)}", f"lake/flows/date={day(9)}",
            f"lake/rollups/1m/date={day(3)}", f"lake/rollups/5m/date={day(20)}",
            f"lake/quarantine/nfcapd/nfcapd.{(TODAY - dt.timedelta(days=6)).strftime('%Y%m%d')}1200",
            f"lake/quarantine/nfcapd/nfcapd.{(TODAY - dt.timedelta(days=6)).strftime('%Y%m%d')}1200.reason",
            f"lake/quarantine/lake/flows/date={day(8)}",
            "lake/quarantine/ingest/flows/b000000000007-00000.zstd.parquet"}
    listed = {str(Path(u["path"]).relative_to(home)) for u in dry["remove"]}
    assert listed == want
    assert dry["remove_bytes"] == sum(u["bytes"] for u in dry["remove"]) > 8000
    spool = next(t for t in dry["tiers"] if t["tier"] == "spool")
    assert spool["units"] == 1 and spool["expire_units"] == 0 and "ledger unreadable" in spool["note"]

    done = json.loads(cli(home, "retention", "--json", env=env).stdout)
    assert [u["path"] for u in done["remove"]] == [u["path"] for u in dry["remove"]]
    assert before - tree(home) >= want and not any((home / w).exists() for w in want)
    for kept in (f"lake/flows/date={day(3)}", f"lake/rollups/1m/date={day(1)}", f"lake/rollups/5m/date={day(3)}",
                 f"lake/rollups/1h/date={day(4000)}", f"lake/reports/top_talkers/date={day(4000)}",
                 f"lake/active/date={day(500)}", "nfcapd/nfcapd.202611250000",
                 "lake/quarantine/ingest/flows/b000000000042-00000.zstd.parquet"):
        assert (home / kept).exists(), f"{kept} should have been kept"
    assert json.loads(cli(home, "retention", "--dry-run", "--json", env=env).stdout)["remove"] == []


@pytest.mark.root
def test_disk_guard_frees_the_oldest_expendable_first_on_a_small_filesystem(tmp_path):
    """On a 32 MiB tmpfs above the high-water mark: expired data goes first, then the
    oldest raw flow day that has rollups, and no more than needed; a day without rollups,
    today and an unproven spool file stay. Below the floor jobs refuse to start."""
    with smallfs.tmpfs(tmp_path / "home", 32) as home:
        lake = home / "lake"
        env = {"FLOWLAKE_RETENTION_FLOWS_DAYS": "5", "FLOWLAKE_RETENTION_DISK_HIGH_WATER_PCT": "60",
               "FLOWLAKE_RETENTION_DISK_FLOOR_PCT": "10", "FLOWLAKE_RETENTION_ROLLUP_1M_DAYS": "2"}
        put(lake / "flows" / f"date={day(7)}" / "hour=00" / "b.parquet", 2 << 20)        # expired
        for n in (4, 3, 2):                                                                  # rolled up
            put(lake / "flows" / f"date={day(n)}" / "hour=00" / "b.parquet", 3 << 20)
            for res in ("1m", "5m", "1h") if n <= 2 else ("5m", "1h"):  # 1m is kept 2 days
                put(lake / "rollups" / res / f"date={day(n)}" / "p.parquet", 1000)
        put(lake / "flows" / f"date={day(1)}" / "hour=00" / "b.parquet", 3 << 20)          # no rollups
        put(lake / "flows" / f"date={day(0)}" / "hour=00" / "b.parquet", 3 << 20)          # today
        put(home / "nfcapd" / "nfcapd.202611250000", 1 << 20)
        # 3.5 MiB over the mark: the expired day (2 MiB) and then one 3 MiB day are enough
        used, total = smallfs.usage(home)
        smallfs.fill_to(home, home / "ballast", 100 * (0.60 * total + 3.5 * (1 << 20)) / total)
        st = json.loads(cli(home, "status", "--json", env=env).stdout)["retention"]
        assert st["disk"]["level"] == "high" and "above retention.disk_high_water_pct=60" in st["alarm"]

        dry = json.loads(cli(home, "retention", "--dry-run", "--json", env=env).stdout)
        went = [str(Path(u["path"]).relative_to(home)) for u in dry["remove"]]
        assert went == [f"lake/flows/date={day(7)}", f"lake/flows/date={day(4)}"], went
        assert [u["why"] for u in dry["guard"]] == ["disk above 60% used: raw flows of a day kept as rollups"]
        done = json.loads(cli(home, "retention", "--json", env=env).stdout)
        assert [u["path"] for u in done["remove"]] == [u["path"] for u in dry["remove"]]
        assert done["result"]["disk_after"]["level"] == "ok"
        for n in (3, 2, 1, 0):
            assert (lake / "flows" / f"date={day(n)}").exists()
        assert (lake / "rollups" / "1h" / f"date={day(4)}").exists(), "rollups answer for the day"
        assert (home / "nfcapd" / "nfcapd.202611250000").exists()

        smallfs.fill_to(home, home / "ballast", 95)
        refused = cli(home, "jobs", "run", "--date", day(1), env=env, ok=False)
        assert refused.returncode != 0 and "jobs not started" in refused.stderr and "disk_floor_pct=10" in refused.stderr
        st = json.loads(cli(home, "status", "--json", env=env).stdout)["retention"]
        assert st["disk"]["level"] == "floor"


def test_spool_reads_the_lake_position_as_the_ingest_reads_its_checkpoint(tmp_path):
    """The newest batch the flows table's ingest transaction reached whose offsets the
    checkpoint holds: a batch Spark has logged but the ingest not committed does not
    count, nor one the checkpoint no longer has (or a bad entry); the offsets come from
    pipelines/batch_offsets.py."""
    import pyarrow as pa

    from flowlake.base import config, delta
    from flowlake.pipelines.retention.spool import lake_committed_offsets
    from test_batch_offsets import offsets_entry

    cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(tmp_path)})
    topic = cfg.kafka.flows_topic
    assert lake_committed_offsets(cfg) is None  # no ingest yet
    cp = cfg.path("state", "checkpoints", "flows")
    for batch, ends in ((3, {"0": 10, "1": 4}), (4, {"0": 12, "1": 9}), (6, {"0": 20, "1": 20})):
        offsets_entry(cp / "offsets" / str(batch), {topic: ends})
    (cp / "offsets" / "5").write_text("v1\n{}\n{not json")
    table = cfg.lake / "flows"
    rows = pa.table({"x": [1], "date": ["2026-11-20"], "hour": pa.array([1], pa.int32())})
    assert lake_committed_offsets(cfg) is None  # no table yet
    for batch in (3, 4, 5):  # committed with the ingest's transaction; 6 is logged, not committed
        assert delta.append_batch(table, rows, "ingest-flows", batch, partition_by=["date", "hour"])
    assert lake_committed_offsets(cfg) == {0: 12, 1: 9}


def test_flows_tier_of_a_delta_table_is_delete_then_vacuum(tmp_path):
    """lake/flows as a Delta table: the expired days go in one DELETE commit (the version
    before it still reads them: its files stay for [compaction] retired_grace_minutes),
    then VACUUM past the grace removes exactly their files; the dry run lists the same days."""
    import deltalake
    import pyarrow as pa

    from flowlake.base import delta

    home = tmp_path / "home"
    table = home / "lake" / "flows"
    for i, n in enumerate((1, 3, 4, 9)):
        rows = pa.table({"bytes": pa.array(range(10 * (i + 1)), pa.int64()), "date": [day(n)] * 10 * (i + 1),
                         "hour": pa.array([5] * 10 * (i + 1), pa.int32())})
        assert delta.append_batch(table, rows, "ingest-flows", i, partition_by=["date", "hour"])
    env = {"FLOWLAKE_RETENTION_FLOWS_DAYS": "3"}
    dry = json.loads(cli(home, "retention", "--dry-run", "--json", env=env).stdout)
    flows = sorted(str(Path(u["path"]).relative_to(home)) for u in dry["remove"] if u["tier"] == "flows")
    assert flows == sorted([f"lake/flows/date={day(4)}", f"lake/flows/date={day(9)}"])
    assert deltalake.DeltaTable(str(table)).version() == 3  # the dry run committed nothing
    old_files = {str(p) for p in table.glob(f"date={day(4)}/*/*.parquet")} | {
        str(p) for p in table.glob(f"date={day(9)}/*/*.parquet")}
    assert len(old_files) == 2

    cli(home, "retention", "--json", env=env)
    t = deltalake.DeltaTable(str(table))
    assert t.version() == 4 and t.transaction_version("ingest-flows") == 3
    got = t.to_pyarrow_table().group_by("date").aggregate([("bytes", "count")]).to_pylist()
    assert {r["date"]: r["bytes_count"] for r in got} == {day(1): 10, day(3): 20}
    assert deltalake.DeltaTable(str(table), version=3).to_pyarrow_table().num_rows == 100  # time travel
    assert all(Path(f).exists() for f in old_files)  # within the grace: still on disk
    assert json.loads(cli(home, "retention", "--dry-run", "--json", env=env).stdout)["remove"] == []

    cli(home, "retention", "--json", env={**env, "FLOWLAKE_COMPACTION_RETIRED_GRACE_MINUTES": "0",
                                          "FLOWLAKE_RETENTION_FLOWS_DAYS": "10"})
    assert not any(Path(f).exists() for f in old_files)  # past the grace: exactly those files went
    assert not (table / f"date={day(9)}").exists()
    assert deltalake.DeltaTable(str(table)).to_pyarrow_table().num_rows == 30
