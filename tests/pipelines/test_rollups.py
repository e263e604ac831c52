"""Rollups: a year of them from the traffic model (fast path), the last two days also as
raw flows in the lake, closed by `flowlake compact`'s own pass. The rollups must equal
the raw flows for the days both hold, and the model's own sums (the truth)."""
from __future__ import annotations

import datetime as dt
import time

import numpy as np
import pyarrow as pa
import pytest

from flowlake.base import delta
from flowlake.collectors.traffic import lake_rows, model
from flowlake.pipelines import hour_close, rollups
from flowlake.schemas.rollups import P95_RANK

from test_compaction import writer_for  # the ingest's own write: files + a commit with its transaction

# A year of modelled flows built once for the module: 12-40 s on 2 cores (idle to loaded).
pytestmark = pytest.mark.slow

FIRST = dt.date(2025, 11, 21)
DAYS = 365
RAW_DAYS = 2  # the last ones, also as raw flows


@pytest.fixture(scope="module")
def year(tmp_path_factory):
    import os

    from flowlake.base import config

    home = tmp_path_factory.mktemp("rollups-home")
    old = os.environ.get("FLOWLAKE_HOME")
    os.environ["FLOWLAKE_HOME"] = str(home)
    config.reset()
    cfg = config.get()
    p = model.ModelParams()
    p.bulk, p.scanners, p.fanin, p.teleimmersion = [], [], [], []  # events are single-day stories
    p.local_prefixes = list(cfg.site.local_prefixes)
    first_ms = int(dt.datetime.combine(FIRST, dt.time(), dt.timezone.utc).timestamp() * 1000)
    t0 = time.perf_counter()
    days = [lake_rows.lake_table(f, p, source_file=f"model-{d}")
            for d, f in lake_rows.growing_days(p, first_ms, DAYS, 300, growth=1.0, seed=3)]
    table = pa.concat_tables(days)
    con = rollups.connect()
    con.register("year_flows", table)
    written = rollups.write_days(cfg, "year_flows", con)
    build_s = time.perf_counter() - t0
    fast = {res: aggregates(con, cfg, res) for res in ("1m", "5m", "1h")}
    yield {"cfg": cfg, "table": table, "days": days, "written": written, "seconds": build_s, "fast": fast, "params": p}
    if old is None:
        os.environ.pop("FLOWLAKE_HOME", None)
    else:
        os.environ["FLOWLAKE_HOME"] = old
    config.reset()


def read(cfg, res: str) -> str:
    return f"read_parquet('{cfg.lake}/rollups/{res}/*/*.parquet', hive_partitioning = true)"


def aggregates(con, cfg, res: str) -> dict:
    rows = con.execute(f"""SELECT CAST(date AS VARCHAR), exporter, direction, app, sum(flows), sum(bytes), sum(packets)
        FROM {read(cfg, res)} GROUP BY ALL""").fetchall()
    return {r[:4]: r[4:] for r in rows}


def test_a_year_of_rollups_from_the_model(year, figure):
    cfg, table = year["cfg"], year["table"]
    con = rollups.connect()
    for res in ("1m", "5m", "1h"):
        dates, flows, nbytes = con.execute(
            f"SELECT count(DISTINCT date), sum(flows), sum(bytes) FROM {read(cfg, res)}").fetchone()
        assert dates == DAYS
        assert flows == table.num_rows
        assert nbytes == pytest.approx(pa.compute.sum(table["bytes"]).as_py(), rel=1e-12)
    # rollup_1d covers every day of traffic (the last day's flows spill past midnight)
    assert con.execute(f"SELECT count(DISTINCT date) FROM {read(cfg, '1d')}").fetchone()[0] in (DAYS, DAYS + 1)
    figure(f"rollups: a year ({DAYS} days, {table.num_rows:,} modelled flows) of 1m/5m/1h/1d rollups built in "
           f"{year['seconds']:.1f} s; rows {year['written']}")


def test_rollups_equal_the_raw_flows_for_the_days_both_hold(year):
    cfg, days = year["cfg"], year["days"]
    w = writer_for(cfg)
    raw = days[-RAW_DAYS:]
    for i, t in enumerate(raw):  # into the lake the ingest's way: a batch per day, committed with its transaction
        day = t["date"][0].as_py()
        assert w.publish(1000 + i, t.drop_columns(["date"]), day=day)
    results = []
    for t in raw:
        results += hour_close.run(cfg, date=t["date"][0].as_py(), settle=False)
    assert len(results) == 24 * RAW_DAYS and all(r["rollup_rows"]["1h"] for r in results)
    con = rollups.connect()
    delta.duckdb_load_delta(con)
    lake = f"delta_scan('{cfg.lake}/flows')"  # a Delta table: its folder also holds the replaced files
    for t in raw:
        day = t["date"][0].as_py()
        truth = (t.num_rows, pa.compute.sum(t["bytes"]).as_py(), pa.compute.sum(t["packets"]).as_py())
        lake_tot = con.execute(f"SELECT count(*), sum(bytes), sum(packets) FROM {lake} WHERE date = '{day}'").fetchone()
        assert lake_tot == truth
        sampled = sum(float(b) / r for b, r in zip(t["bytes"].to_pylist(), t["sampling_rate"].to_pylist()))
        for res in ("1m", "5m", "1h"):
            f, b, p, sb = con.execute(f"""SELECT sum(flows), sum(bytes), sum(packets), sum(sampled_bytes)
                FROM {read(cfg, res)} WHERE date = '{day}'""").fetchone()
            assert f == truth[0]
            assert b == pytest.approx(truth[1], rel=1e-12) and p == pytest.approx(truth[2], rel=1e-12)
            assert sb == pytest.approx(sampled, rel=1e-12)
    # Rebuilt hour by hour from the compacted lake, they equal the year's fast path exactly.
    for res in ("1m", "5m", "1h"):
        after = aggregates(con, cfg, res)
        before = year["fast"][res]
        assert after.keys() == before.keys()
        for k in after:
            assert after[k][0] == before[k][0]
            assert after[k][1:] == pytest.approx(before[k][1:], rel=1e-9)


def test_daily_p95_matches_an_independent_computation(year):
    """rollup_1d's p95 of one interface against numpy over the raw flows, spread over
    their duration into 5-minute buckets by hand."""
    cfg, t = year["cfg"], year["days"][-1]
    day = t["date"][0].as_py()
    exporter, if_index = "127.0.0.2", 1  # border-a's uplink: traffic entering it
    prev = year["days"][-2]
    d0 = dt.datetime.fromisoformat(day).replace(tzinfo=dt.timezone.utc).timestamp()
    rates = np.zeros(288)
    for tab in (prev, t):
        sel = pa.compute.and_(pa.compute.equal(tab["exporter"], exporter), pa.compute.equal(tab["input_if"], if_index))
        sub = tab.filter(sel)
        s = sub["time_start"].cast(pa.int64()).to_numpy() / 1000.0
        e = sub["time_end"].cast(pa.int64()).to_numpy() / 1000.0
        for si, ei, b in zip(s, e, sub["bytes"].to_numpy()):
            if ei <= si:
                k = int((si - d0) // 300)
                if 0 <= k < 288:
                    rates[k] += b
                continue
            for k in range(max(0, int((si - d0) // 300)), min(288, int(np.ceil((ei - d0) / 300)))):
                lo, hi = max(si, d0 + 300 * k), min(ei, d0 + 300 * (k + 1))
                if hi > lo:
                    rates[k] += b * (hi - lo) / (ei - si)
    rates = np.sort(rates * 8 / 300)
    expect_p95 = rates[P95_RANK - 1]
    con = rollups.connect()
    p95, peak = con.execute(f"""SELECT p95_bps, peak_bps FROM {read(cfg, '1d')} WHERE date = '{day}'
        AND exporter = '{exporter}' AND if_index = {if_index} AND side = 'in' AND direction = 'all'""").fetchone()
    assert p95 == pytest.approx(expect_p95, rel=1e-9)
    assert peak == pytest.approx(rates[-1], rel=1e-9)


def test_capacity_forecast_of_the_year(year, monkeypatch):
    """The capacity_forecast job over the year's rollup_1d: its trend equals numpy's
    least-squares line, and the crossing day equals the line's own, inside its interval."""
    from flowlake.base import config
    from flowlake.jobs import capacity_forecast
    from flowlake.jobs.context import JobContext

    cfg = year["cfg"]
    last = FIRST + dt.timedelta(days=DAYS - 1)
    con = rollups.connect()
    rows = con.execute(f"""SELECT CAST(date AS VARCHAR), p95_bps FROM {read(cfg, '1d')} WHERE exporter = '127.0.0.2'
        AND if_index = 1 AND side = 'in' AND direction = 'all' AND date <= '{last}' ORDER BY date""").fetchall()
    x = np.array([(dt.date.fromisoformat(d) - FIRST).days for d, _ in rows], float)
    y = np.array([v for _, v in rows])
    slope, intercept = np.polyfit(x, y, 1)
    assert slope > 0  # the modelled volume doubles over the year
    trend_end = intercept + slope * x[-1]
    speed = trend_end * 1.25 / 0.8  # 80 % of it is reached about a quarter of the trend's level later
    monkeypatch.setenv("FLOWLAKE_ACTIVE_INTERFACE_SPEEDS", f"127.0.0.2/1={speed}")
    config.reset()
    try:
        capacity_forecast.run(JobContext(None, config.get(), last))
    finally:
        monkeypatch.delenv("FLOWLAKE_ACTIVE_INTERFACE_SPEEDS")
        config.reset()
    out = con.execute(f"""SELECT * FROM read_parquet('{cfg.lake}/reports/capacity_forecast/*/*.parquet',
        hive_partitioning = true)""").df()
    row = out[(out.exporter == "127.0.0.2") & (out.if_index == 1) & (out.side == "in")].iloc[0]
    assert row.days == len(rows) and row.status == "forecast"
    assert row.growth_bps_per_day == pytest.approx(slope, rel=1e-6)
    assert row.growth_low < slope < row.growth_high
    expect = FIRST + dt.timedelta(days=int(np.ceil((0.8 * speed - intercept) / slope)))
    assert abs((dt.date.fromisoformat(row.crossing_date) - expect).days) <= 1
    assert row.crossing_earliest <= row.crossing_date and (row.crossing_latest is None or row.crossing_date <= row.crossing_latest)
    # At the default 1 Gbit/s the modelled traffic crosses nothing within the horizon.
    other = out[(out.exporter == "127.0.0.3") & (out.side == "in")]
    assert len(other) and other.crossing_date.isna().all()
