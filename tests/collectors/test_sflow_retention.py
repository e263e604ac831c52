"""Bounds of what the sFlow tap writes (issue 35): lake/sflow_agent_health is a retention
tier ([retention] sflow_agent_health_days), and the tap's one-file-per-flush days are
merged into one file per day by every retention pass: sflow_agent_health always, its
interface counter files where no SNMP poller runs (an sFlow-only site), with the SNMP
poller's own merge. No services: files with the tables' schemas, the retention pass's
merge step as the retention service calls it."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq

from flowlake import components
from flowlake.base import config
from flowlake.collectors import sfcapd
from flowlake.collectors.snmp import store
from flowlake.pipelines.retention.tiers import lake_tiers
from flowlake.retention_service import merge_sflow_days
from flowlake.schemas.messages import arrow_schema
from flowlake.schemas.sflow import SFLOW_AGENT_HEALTH

TODAY = dt.datetime.now(dt.UTC).date()


def _cfg(tmp_path, text: str = "", env: dict | None = None):
    path = tmp_path / "flowlake.toml"
    path.write_text(f'home = "{tmp_path / "home"}"\n' + text)
    return config.load(path, env=env or {})


def _ms(day: dt.date, minute: int) -> int:
    return int(dt.datetime.combine(day, dt.time(12, minute), dt.UTC).timestamp() * 1000)


def _health(cfg, day: dt.date, minute: int, agent: str) -> None:
    schema = arrow_schema(SFLOW_AGENT_HEALTH)
    schema = schema.remove(schema.get_field_index("date"))
    start, end = _ms(day, minute), _ms(day, minute + 1)
    row = {f.name: 0 for f in schema}
    row.update(interval_start=dt.datetime.fromtimestamp(start / 1000, dt.UTC),
               interval_end=dt.datetime.fromtimestamp(end / 1000, dt.UTC), agent=agent, sub_agent=minute,
               senders="127.0.0.1", datagrams=minute + 1, samples_per_s=0.5, sampling_rates="10", bad_reasons="")
    part = cfg.lake / "sflow_agent_health" / f"date={day}"
    part.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([row], schema=schema), part / f"sflow-{start}.parquet")


def _counters(cfg, day: dt.date, minute: int, agent: str) -> None:
    schema = store.file_schema()
    row = {f.name: 0 for f in schema}
    row.update(time=dt.datetime.fromtimestamp(_ms(day, minute) / 1000, dt.UTC), exporter=agent, if_index=3,
               if_name="", speed_mbps=1000, oper_status=1, interval_s=60.0, reset=False, in_octets=minute)
    part = cfg.lake / "interface_counters" / f"date={day}"
    part.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([row], schema=schema), part / f"sflow_{agent}-{_ms(day, minute)}.parquet")


def _seed(cfg) -> dict[int, dt.date]:
    days = {n: TODAY - dt.timedelta(days=n) for n in (40, 3, 1, 0)}
    for d in days.values():
        for minute, agent in ((1, "192.0.2.7"), (0, "192.0.2.7"), (2, "192.0.2.8")):
            _health(cfg, d, minute, agent)
            _counters(cfg, d, minute, agent)
    return days


def _rows(part) -> list[dict]:
    return sorted(pq.read_table(part).to_pylist(), key=lambda r: sorted(r.items(), key=str))


def test_sflow_only_site_merges_health_and_counter_days(tmp_path):
    cfg = _cfg(tmp_path)
    assert not components.get(cfg, "snmp").enabled()  # sFlow only: no exporter has SNMP
    days = _seed(cfg)
    health, counters = cfg.lake / "sflow_agent_health", cfg.lake / "interface_counters"
    before = {(t, n): _rows(root / f"date={days[n]}") for t, root in (("h", health), ("c", counters)) for n in days}
    merge_sflow_days(cfg)
    for root, t in ((health, "h"), (counters, "c")):
        for n in (40, 3):  # before yesterday: one file, the same rows
            assert [p.name for p in (root / f"date={days[n]}").iterdir()] == ["merged.parquet"], (root, n)
            assert _rows(root / f"date={days[n]}") == before[(t, n)] and len(before[(t, n)]) == 3
        for n in (1, 0):  # yesterday and today: the tap may still write there
            assert len(list((root / f"date={days[n]}").glob("*.parquet"))) == 3, (root, n)
    merged = pq.read_table(health / f"date={days[3]}").to_pylist()
    assert [(r["agent"], r["sub_agent"]) for r in merged] == [("192.0.2.7", 0), ("192.0.2.7", 1), ("192.0.2.8", 2)]
    assert sfcapd.compact_old_days(cfg, counters=True) == {"sflow_agent_health": [], "interface_counters": []}
    assert not [p for p in cfg.lake.rglob("*") if ".staging" in str(p) and p.is_file()]


def test_with_an_snmp_poller_its_own_merge_does_the_counters(tmp_path):
    cfg = _cfg(tmp_path, '[exporters."192.0.2.9"]\nsnmp_community = "public"\n')

    assert components.get(cfg, "snmp").enabled()
    days = _seed(cfg)
    merge_sflow_days(cfg)
    assert [p.name for p in (cfg.lake / "sflow_agent_health" / f"date={days[3]}").iterdir()] == ["merged.parquet"]
    assert len(list((cfg.lake / "interface_counters" / f"date={days[3]}").glob("*.parquet"))) == 3  # the poller's


def test_sflow_agent_health_is_a_retention_tier(tmp_path):
    cfg = _cfg(tmp_path)
    assert cfg.retention.sflow_agent_health_days == 90  # flowlake.toml's default
    days = _seed(cfg)
    tier = next(t for t in lake_tiers(cfg, TODAY) if t.name == "sflow_agent_health")
    assert tier.limit == "90 days" and [u.day for u in tier.units] == sorted(days.values())
    assert tier.expire == []
    short = _cfg(tmp_path, env={"FLOWLAKE_RETENTION_SFLOW_AGENT_HEALTH_DAYS": "2"})
    tier = next(t for t in lake_tiers(short, TODAY) if t.name == "sflow_agent_health")
    assert tier.limit == "2 days" and [u.day for u in tier.expire] == [days[40], days[3]]
    counters = next(t for t in lake_tiers(short, TODAY) if t.name == "interface_counters")
    assert [u.day for u in counters.units] == sorted(days.values())  # the tap's counter files: that tier's bound
