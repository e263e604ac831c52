"""Job interface_capacity on counters written by the poller's own writer and flows in the
lake layout: utilisation (5 min, hour, day, p95 and peak) and flow coverage, checked
against figures computed here from the simulated link rates; then the status warning."""
from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flowlake.base import config
from flowlake.collectors.snmp import coverage, deltas, store
from flowlake.jobs.context import JobContext
from flowlake.jobs.interface_capacity import flow_hours_sql, run

DAY = dt.date(2026, 11, 20)
T0 = int(dt.datetime(2026, 11, 20, tzinfo=dt.timezone.utc).timestamp() * 1000)
EXP, IDX, SPEED = "192.0.2.1", 5, 10_000  # Mbit/s
SPIKE = (30 * 60_000, 35 * 60_000)        # 00:30-00:35: 5 Gbit/s in, else 1 Gbit/s


def in_rate(ms_into_day: int) -> float:
    return 5e9 if SPIKE[0] <= ms_into_day < SPIKE[1] else 1e9


def simulate(cfg) -> None:
    """Polls every 60 s from 23:59 the day before to 02:00 (one missed at 01:10), with the
    in-octets counter wrapping 2^64 on the way; counters advance at the link rates."""
    times = [T0 - 60_000 + 60_000 * k for k in range(122) if T0 - 60_000 + 60_000 * k != T0 + 70 * 60_000]
    octets_in, octets_out, prev = 2 ** 64 - 10 ** 11, 0, None
    for i, t in enumerate(times):
        if prev is not None:
            for ms in range(prev["time_ms"], t, 1000):  # per second, so the spike edges land exactly
                octets_in += int(in_rate(ms - T0) / 8)
                octets_out += int(0.5e9 / 8)
        cur = {"time_ms": t, "sys_uptime_cs": 100 + i * 6000,
               "counters": {IDX: {"in_octets": octets_in % 2 ** 64, "out_octets": octets_out}}}
        rows = deltas.rows(prev, cur)
        for r in rows:
            r.update(if_name="xe-0/0/1", speed_mbps=SPEED, oper_status=1)
        store.write_counters(cfg, EXP, t, rows)
        prev = cur


def write_flows(cfg, hour: int, input_bytes: float, n: int = 4) -> None:
    part = cfg.lake / "flows" / f"date={DAY}" / f"hour={hour:02d}"
    part.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"exporter": [EXP] * n, "input_if": [IDX] * n, "output_if": [9] * n,
                             "bytes": [int(input_bytes / n)] * n}), part / "part-0.parquet")


@pytest.fixture
def cfg(tmp_path):
    path = tmp_path / "flowlake.toml"
    path.write_text(f'home = "{tmp_path / "home"}"\n')
    return config.load(path, env={})


def read(cfg, table):
    return pq.read_table(cfg.lake / "reports" / table / f"date={DAY}").to_pylist()


def test_utilisation_and_coverage_from_counters_and_flows(cfg):
    simulate(cfg)
    hour_bytes = [(55 * 60 * 1e9 + 5 * 60 * 5e9) / 8, 3600 * 1e9 / 8]  # what the link carried in, per hour
    write_flows(cfg, 0, 0.98 * hour_bytes[0])
    write_flows(cfg, 1, 0.5 * hour_bytes[1])   # half the traffic never reached the collector
    run(JobContext(spark=None, cfg=cfg, date=DAY))

    util = read(cfg, "interface_utilisation")
    five = {(r["bucket"].hour, r["bucket"].minute): r for r in util if r["period"] == "5m" and r["side"] == "in"}
    assert len(five) == 24  # two hours with counters; nothing before midnight counts for the day
    assert five[(0, 30)]["bps"] == pytest.approx(5e9) and five[(0, 30)]["utilisation"] == pytest.approx(0.5)
    for key in ((0, 0), (0, 25), (0, 35), (1, 10), (1, 55)):   # 01:10 spans the missed poll: spread, same rate
        assert five[key]["bps"] == pytest.approx(1e9), key
    assert five[(1, 5)]["seconds"] == pytest.approx(300)
    hours = {r["bucket"].hour: r for r in util if r["period"] == "1h" and r["side"] == "in"}
    assert hours[0]["bytes"] == pytest.approx(hour_bytes[0]) and hours[1]["bytes"] == pytest.approx(hour_bytes[1])
    assert hours[0]["bps"] == pytest.approx(hour_bytes[0] * 8 / 3600)
    assert hours[0]["peak_bps"] == pytest.approx(5e9) and hours[0]["p95_bps"] == pytest.approx(5e9)  # rank 12 of 12
    assert hours[1]["peak_bps"] == pytest.approx(1e9)
    (day_in,) = [r for r in util if r["period"] == "1d" and r["side"] == "in"]
    assert day_in["p95_bps"] == pytest.approx(1e9)           # rank 23 of 24: the one spike is above it
    assert day_in["peak_utilisation"] == pytest.approx(0.5) and day_in["speed_bps"] == 1e10
    assert day_in["if_name"] == "xe-0/0/1" and day_in["bucket"] == dt.datetime(2026, 11, 20)
    (day_out,) = [r for r in util if r["period"] == "1d" and r["side"] == "out"]
    assert day_out["bps"] == pytest.approx(0.5e9) and day_out["utilisation"] == pytest.approx(0.05)

    cov = {(r["side"], r["hour"]): r for r in read(cfg, "flow_coverage")}
    assert cov[("in", 0)]["coverage"] == pytest.approx(0.98, abs=1e-6)
    assert cov[("in", 1)]["coverage"] == pytest.approx(0.5, abs=1e-6)
    assert cov[("in", 0)]["counter_seconds"] == pytest.approx(3600) and cov[("in", 0)]["flows"] == 4
    assert cov[("out", 0)]["coverage"] == 0 and cov[("out", 0)]["flow_bytes"] == 0  # no flow leaves through it
    assert cov[("in", None)]["coverage"] is None, "two hours of counters do not make a day"
    assert cov[("in", None)]["flow_bytes"] == pytest.approx(0.98 * hour_bytes[0] + 0.5 * hour_bytes[1], rel=1e-6)

    st = coverage.coverage_status(cfg)
    assert st["date"] == str(DAY) and st["interfaces"] == 2
    warned = {(w["side"], w["hours"]) for w in st["outside"]}
    assert warned == {("in", 1), ("out", 2)}
    assert any("192.0.2.1 if5 (xe-0/0/1) in: 0.50 in 1 of 2 hours" in w for w in st["warnings"])


def test_a_day_without_counters_or_flows_writes_empty_tables(cfg):
    run(JobContext(spark=None, cfg=cfg, date=DAY))
    assert read(cfg, "interface_utilisation") == [] and read(cfg, "flow_coverage") == []
    assert coverage.coverage_status(cfg)["warnings"] == []


def test_a_flow_counts_in_the_hours_it_lasted_as_the_counters_saw_it():
    """flow_hours_sql: bytes spread evenly over the flow's lifetime, the share past the day's
    end left out, the flow counted once (its first hour); a dropped flow does not leave."""
    con = duckdb.connect()
    rows = [  # start, end (ms into the day), bytes, forwarding status
        (59 * 60_000, 61 * 60_000, 120, 64),              # 00:59-01:01: half in hour 0, half in hour 1
        (5 * 60_000, 5 * 60_000, 7, None),               # no duration: all at its start
        (86_400_000 - 60_000, 86_400_000 + 60_000, 50, 64),  # 23:59-00:01 the next day: half today
        (3_600_000, 3_600_000 + 1000, 9, 130)]            # dropped
    con.execute("CREATE TABLE f AS SELECT * FROM (VALUES " + ", ".join(
        f"('{EXP}', {IDX}, 9, make_timestamp(({T0} + {s}) * 1000), make_timestamp(({T0} + {e}) * 1000), {b}, "
        f"{'NULL' if st is None else st}::INTEGER)" for s, e, b, st in rows)
        + ") t(exporter, input_if, output_if, time_start, time_end, bytes, forwarding_status)")
    got = con.execute(f"""SELECT hour, sum(bytes), sum(flows), bool_and(leaves)
        FROM ({flow_hours_sql('f', DAY, 'coalesce(forwarding_status, 64) < 128', True)}) GROUP BY hour
        ORDER BY hour""").fetchall()
    assert got == [(0, 60 + 7, 2, True), (1, 60 + 9, 1, False), (23, 25, 1, True)]
