"""Pure transforms of the active jobs on small hand-made frames (the shared Spark session)."""
from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from flowlake.jobs import active_summary, bulk_impact, bulk_transfers, path_models
from flowlake.schemas import FLOWS_TABLE
from flowlake.schemas.active import ACTIVE
from flow_rows import lake_row

T0 = dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.timezone.utc)


def at(seconds):
    return T0 + dt.timedelta(seconds=seconds)


def rtt_row(target, start_s, dur_s, sent, received, rtt_avg, jitter=None, rtt_min=None, rtt_max=None,
            test_type="rtt", params=None, metrics=None):
    m = {"sent": float(sent), "received": float(received)}
    if rtt_avg is not None:
        m.update(rtt_avg_ms=float(rtt_avg), rtt_min_ms=float(rtt_min or rtt_avg), rtt_max_ms=float(rtt_max or rtt_avg),
                 rtt_median_ms=float(rtt_avg))
    if jitter is not None:
        m["jitter_ms"] = float(jitter)
    if metrics is not None:
        m = metrics
    return (test_type, "192.0.2.10", target, at(start_s), at(start_s + dur_s), params or {}, m, "ping", "",
            "2026-11-20")


def active_df(spark, rows):
    return spark.createDataFrame(rows, ACTIVE.spark_schema())


def flow(start_s, end_s, src, dst, sport, dport, nbytes, proto=6, exporter="192.0.2.1", out_if=3):
    return lake_row(time_start=at(start_s), time_end=at(end_s), exporter=exporter, input_if=1, output_if=out_if,
                    src_addr=src, dst_addr=dst, src_port=sport, dst_port=dport, proto=proto,
                    packets=nbytes // 1000, bytes=nbytes, sampling_rate=1, source_file="f", date="2026-11-20",
                    hour=10)


# ---- active_summary ----------------------------------------------------------------------
@pytest.mark.integration
def test_active_summary_bands_mathis_and_responsiveness(spark):
    rows = [rtt_row("a", 0, 10, 10, 10, 100.0, jitter=2.0, rtt_min=90, rtt_max=120),
            rtt_row("a", 1800, 10, 10, 10, 140.0, jitter=4.0, rtt_min=130, rtt_max=150),
            rtt_row("b", 0, 10, 20, 18, 30.0),             # 10% loss
            rtt_row("c", 0, 30, 30, 0, None)]              # unreachable
    out = {(r.target, r.period): r for r in
           active_summary.summarise(active_df(spark, rows), 1460, 1e9, "upper_bound").collect()}
    a = out[("a", "hour")]
    assert a.tests == 2 and a.sent == 20 and a.loss == 0 and a.rtt_avg_ms == pytest.approx(120.0)
    assert (a.rtt_min_ms, a.rtt_max_ms, a.jitter_ms) == (90.0, 150.0, 3.0)
    assert a.rtt_band == "64-128" and a.loss_band == "0-0.1%" and a.reachability == 1.0
    # zero loss: p = 1/(20+1), flagged as the bound
    assert a.mathis_bound is True and a.mathis_loss == pytest.approx(1 / 21)
    assert a.mathis_throughput_bps == pytest.approx(1460 * 8 / 0.120 * math.sqrt(1.5) / math.sqrt(1 / 21))
    assert a.responsiveness_s == pytest.approx(1e9 / 8 * 0.120 ** 2 / (2 * 1460))
    b = out[("b", "day")]
    assert b.loss == pytest.approx(0.1) and b.loss_band == "5-12%"
    assert b.mathis_bound is False and b.mathis_throughput_bps == pytest.approx(
        1460 * 8 / 0.030 * math.sqrt(1.5) / math.sqrt(0.1))
    c = out[("c", "day")]
    assert c.reachability == 0 and c.loss == 1 and c.rtt_band is None and c.mathis_throughput_bps is None
    assert c.loss_band == ">12%"
    nulls = {r.target: r for r in active_summary.summarise(active_df(spark, rows), 1460, 1e9, "null")
             .where("period = 'day'").collect()}
    assert nulls["a"].mathis_throughput_bps is None and nulls["b"].mathis_throughput_bps is not None


@pytest.mark.parametrize("loss,band", [(0.0, "0-0.1%"), (0.0009, "0-0.1%"), (0.005, "0.1-1%"), (0.02, "1-2.5%"),
                                       (0.03, "2.5-5%"), (0.1, "5-12%"), (0.5, ">12%")])
@pytest.mark.integration
def test_loss_band_edges(spark, loss, band):
    sent = 10000
    rows = [rtt_row("x", 0, 10, sent, round(sent * (1 - loss)), 600.0)]
    (r,) = active_summary.summarise(active_df(spark, rows), 1460, 1e9).where("period='day'").collect()
    assert r.loss_band == band and r.rtt_band == ">512"


# ---- bulk_transfers ----------------------------------------------------------------------
@pytest.mark.integration
def test_bulk_transfers_thresholds_ports_and_link_share(spark):
    flows = spark.createDataFrame([
        flow(0, 100, "10.0.0.1", "10.0.0.2", 40000, 443, 2_000_000_000),   # 160 Mbit/s for 100 s: thresholds
        flow(0, 100, "10.0.0.1", "10.0.0.2", 40001, 443, 50_000_000),      # too small
        flow(0, 5, "10.0.0.1", "10.0.0.3", 40002, 5201, 30_000_000),       # iperf3 port
        flow(0, 1, "10.0.0.1", "10.0.0.3", 40003, 5201, 500),              # iperf3 control connection
        flow(0, 20, "10.0.0.4", "10.0.0.5", 2811, 50000, 500_000_000, out_if=7),  # GridFTP, > thresholds
    ], FLOWS_TABLE.spark_schema())
    out = bulk_transfers.classify(flows, 100_000_000, 10.0, 10e6, [5021, 2811, 5201], 1_000_000,
                                  ["*/7=10000000000", "192.0.2.1/3=1000000000"], 5e8)
    got = {r.src_port: r for r in out.collect()}
    assert set(got) == {40000, 40002, 2811}
    assert got[40000].reason == "thresholds" and got[40000].rate_bps == pytest.approx(160e6)
    assert got[40000].link_speed_bps == 1e9 and got[40000].link_share == pytest.approx(0.16)
    assert got[40002].reason == "port"
    assert got[2811].reason == "thresholds+port" and got[2811].link_speed_bps == 1e10


@pytest.mark.integration
def test_bulk_transfers_bad_speed_entry(spark):
    with pytest.raises(ValueError, match="interface_speeds"):
        bulk_transfers.parse_speeds(["192.0.2.1=10"])


# ---- bulk_impact -------------------------------------------------------------------------
@pytest.mark.integration
def test_bulk_impact_loaded_vs_unloaded_with_mann_whitney(spark):
    unloaded = [0.5, 0.6, 0.55, 0.7, 0.52, 0.58]
    loaded = [8.0, 12.0, 9.5, 15.0]
    rows = [rtt_row("t", 10 * i, 5, 10, 10, v, jitter=0.1) for i, v in enumerate(unloaded)]
    rows += [rtt_row("t", 100 + 10 * i, 5, 10, 9, v, jitter=2.0) for i, v in enumerate(loaded)]
    bulk = spark.createDataFrame([(at(95), at(140))], "time_start timestamp, time_end timestamp")
    (r,) = bulk_impact.impact(active_df(spark, rows), bulk).collect()
    assert (r.tests_unloaded, r.tests_loaded) == (6, 4)
    assert r.rtt_median_unloaded_ms == pytest.approx(np.median(unloaded))
    assert r.rtt_p95_loaded_ms == pytest.approx(np.percentile(loaded, 95))
    assert r.loss_unloaded == 0 and r.loss_loaded == pytest.approx(0.1) and r.loss_diff == pytest.approx(0.1)
    assert r.jitter_diff_ms == pytest.approx(1.9)
    ref = mannwhitneyu(loaded, unloaded, alternative="greater")
    assert r.mannwhitney_u == ref.statistic and r.p_value == pytest.approx(ref.pvalue)
    assert r.p_adjusted == pytest.approx(ref.pvalue) and r.significant  # one target: nothing to correct


BULK = (1000, 2000)  # the bulk window of the verdict tests, in seconds after T0


def verdict(spark, per_target: dict, **kw):
    """{target: (unloaded RTTs, loaded RTTs)} -> {target: bulk_impact row}."""
    rows = []
    for target, (unloaded, loaded) in per_target.items():
        rows += [rtt_row(target, 10 * i, 5, 10, 10, v) for i, v in enumerate(unloaded)]
        rows += [rtt_row(target, BULK[0] + 10 * i + 1, 5, 10, 10, v) for i, v in enumerate(loaded)]
    bulk = spark.createDataFrame([(at(BULK[0]), at(BULK[1]))], "time_start timestamp, time_end timestamp")
    return {r.target: r for r in bulk_impact.impact(active_df(spark, rows), bulk, **kw).collect()}


def steady(shift=0.0, n=20):
    """RTTs with a 0.0095 ms spread, so a 0.02 ms shift separates loaded from unloaded completely."""
    return [10.0 + 0.0005 * i + shift for i in range(n)]


@pytest.mark.integration
def test_bulk_impact_tiny_shifts_are_not_significant(spark):
    per = {"up": (steady(), steady(+0.02)), "down": (steady(), steady(-0.02))}
    for unloaded, loaded in per.values():  # the old verdict (two-sided, p < 0.05) flagged both
        assert mannwhitneyu(loaded, unloaded, alternative="two-sided").pvalue < 1e-6
    rows = verdict(spark, per, alpha=0.05, min_rtt_ms=1.0)
    assert rows["up"].rtt_median_diff_ms == pytest.approx(0.02) and rows["up"].p_adjusted < 1e-6
    assert rows["up"].significant is False  # below the effect-size floor
    assert rows["down"].rtt_median_diff_ms == pytest.approx(-0.02) and rows["down"].p_value > 0.99
    assert rows["down"].significant is False  # an improvement is not a degradation
    floorless = verdict(spark, per, alpha=0.05, min_rtt_ms=0.01)
    assert floorless["up"].significant and floorless["down"].significant is False


@pytest.mark.integration
def test_bulk_impact_real_degradation_is_significant_improvement_is_not(spark):
    rng = np.random.default_rng(3)
    noisy = lambda shift: list(10.0 + shift + rng.normal(0, 0.5, 12))  # noqa: E731
    per = {f"worse{k}": (noisy(0), noisy(5.0)) for k in range(3)}
    per |= {"better": (noisy(0), noisy(-5.0)), "same": (noisy(0), noisy(0))}
    rows = verdict(spark, per, alpha=0.05, min_rtt_ms=1.0)
    assert all(rows[f"worse{k}"].significant and rows[f"worse{k}"].rtt_median_diff_ms > 3 for k in range(3))
    assert rows["better"].significant is False and rows["better"].rtt_median_diff_ms < -3
    assert rows["same"].significant is False


@pytest.mark.integration
def test_bulk_impact_holm_correction_for_the_day_s_targets(spark):
    # 3 vs 3 tests, completely separated by 3 ms: exact one-sided p = 1/C(6,3) = 0.05 each
    per = {f"m{k}": ([10.0, 11.0, 12.0], [13.0, 14.0, 15.0]) for k in range(4)}
    per["one_side_only"] = ([10.0], [20.0, 21.0])  # not tested: does not count in the correction
    rows = verdict(spark, per, alpha=0.1, min_rtt_ms=1.0)
    assert rows["one_side_only"].p_value is None and rows["one_side_only"].p_adjusted is None
    for k in range(4):
        r = rows[f"m{k}"]
        assert r.p_value == pytest.approx(0.05)  # alone it passes alpha = 0.1 ...
        assert r.p_adjusted == pytest.approx(0.2) and r.significant is False  # ... not as one of four
    alone = verdict(spark, {"m0": per["m0"]}, alpha=0.1, min_rtt_ms=1.0)
    assert alone["m0"].significant
    # Holm step-down by hand: sorted p 0.01, 0.03, 0.04 -> 3*0.01, max(0.03, 2*0.03), max(0.06, 1*0.04)
    assert bulk_impact.holm([0.01, None, 0.04, 0.03]) == [pytest.approx(0.03), None, pytest.approx(0.06),
                                                          pytest.approx(0.06)]


@pytest.mark.integration
def test_mark_loaded_uses_interval_overlap(spark):
    tests = spark.createDataFrame([("a", at(0), at(5)), ("a", at(9), at(12)), ("a", at(30), at(31))],
                                  "target string, start timestamp, end timestamp")
    bulk = spark.createDataFrame([(at(10), at(20)), (at(11), at(25))], "time_start timestamp, time_end timestamp")
    flags = sorted((r.start, r.loaded) for r in bulk_impact.mark_loaded(tests, bulk).collect())
    assert [f for _, f in flags] == [False, True, False]


@pytest.mark.integration
def test_throughput_against_cross_traffic(spark):
    act = active_df(spark, [rtt_row("198.51.100.7", 0, 10, 0, 0, None, test_type="throughput",
                                    metrics={"throughput_bps": 4e8})])
    flows = spark.createDataFrame([
        flow(0, 10, "192.0.2.10", "198.51.100.7", 40000, 5201, 500_000_000),  # the test itself: excluded
        flow(5, 15, "10.0.0.1", "10.0.0.2", 1, 2, 100_000_000),              # half inside the test
        flow(20, 30, "10.0.0.1", "10.0.0.2", 1, 2, 100_000_000),             # after it
    ], FLOWS_TABLE.spark_schema())
    bulk = spark.createDataFrame([(at(5), at(15))], "time_start timestamp, time_end timestamp")
    (r,) = bulk_impact.throughput_vs_cross(act, flows, bulk).collect()
    assert r.cross_bytes == pytest.approx(50_000_000) and r.cross_bps == pytest.approx(40e6)
    assert r.bulk_flows == 1 and r.throughput_bps == 4e8


# ---- path_models -------------------------------------------------------------------------
@pytest.mark.integration
def test_path_fit_matches_numpy_polyfit(spark):
    rng = np.random.default_rng(7)
    rows, truth = [], {"A": (7e-5, 2.0), "B": (2e-5, 10.0)}
    for path, (a, l) in truth.items():
        for size in (1e3, 1e4, 5e4, 1e5, 5e5, 1e6):
            y = a * size + l + rng.normal(0, 0.2)
            rows.append(rtt_row("d", 0, 1, 0, 0, None, test_type="sweep",
                                params={"path": path, "message_size_bytes": str(int(size))},
                                metrics={"latency_ms": y}))
    got = {r.path: r for r in path_models.fit(active_df(spark, rows)).collect()}
    for path in truth:
        xs = [float(r[5]["message_size_bytes"]) for r in rows if r[5]["path"] == path]
        ys = [r[6]["latency_ms"] for r in rows if r[5]["path"] == path]
        slope, icpt = np.polyfit(xs, ys, 1)
        assert got[path].a_ms_per_byte == pytest.approx(slope, rel=1e-6)
        assert got[path].l_ms == pytest.approx(icpt, rel=1e-6)
        r2 = 1 - np.sum((np.array(ys) - (slope * np.array(xs) + icpt)) ** 2) / np.sum((np.array(ys) - np.mean(ys)) ** 2)
        assert got[path].r2 == pytest.approx(r2, rel=1e-6)
        assert got[path].points == 6


def test_best_path_ranges_and_split():
    models = [("A", 7e-5, 2.0), ("B", 2e-5, 10.0), ("C", 1e-3, 100.0)]
    ranges = path_models.best_ranges(models)
    cross = (10.0 - 2.0) / (7e-5 - 2e-5)  # 160000 bytes
    assert ranges == [(0.0, pytest.approx(cross), "A"), (pytest.approx(cross), None, "B")]
    xa, xb, t = path_models.split(7e-5, 2.0, 2e-5, 10.0, 1e6)
    assert xa + xb == pytest.approx(1e6)
    assert 7e-5 * xa + 2.0 == pytest.approx(2e-5 * xb + 10.0) == pytest.approx(t)
    assert t < min(7e-5 * 1e6 + 2.0, 2e-5 * 1e6 + 10.0)
    # small message: splitting cannot help, everything goes on the low-latency path
    xa, xb, t = path_models.split(7e-5, 2.0, 2e-5, 10.0, 1000)
    assert (xa, xb) == (1000, 0) and t == pytest.approx(7e-5 * 1000 + 2.0)


# ---- whole runs on a small lake ------------------------------------------------------------
@pytest.mark.integration
def test_active_summary_and_path_models_runs_write_their_tables(spark, cfg, tmp_path):
    from flowlake.impact_lab import _LabConfig
    from flowlake.collectors.active.parsers import parse_file
    from flowlake.jobs.context import JobContext
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data" / "active"
    recs = parse_file(data / "path_latency_sweep.csv") + parse_file(data / "pscheduler_rtt.json")
    rows = [(r["test_type"], r["source"], r["destination"],
             dt.datetime.fromtimestamp(r["start"] / 1000, dt.timezone.utc),
             dt.datetime.fromtimestamp(r["end"] / 1000, dt.timezone.utc), r["parameters"], r["metrics"],
             r["tool"], r["source_file"], "2026-11-20") for r in recs]
    lake = tmp_path / "lake"
    active_df(spark, rows).write.partitionBy("date").parquet(str(lake / "active"))
    ctx = JobContext(spark=spark, cfg=_LabConfig(cfg, lake), date=dt.date(2026, 11, 20))
    active_summary.run(ctx)
    path_models.run(ctx)
    summary = ctx.report("active_summary").where("period = 'day'").collect()
    assert [(r.target, r.loss) for r in summary] == [("198.51.100.7", pytest.approx(0.1))]
    models = {r.path: r for r in ctx.report("path_models").collect()}
    assert set(models) == {"A", "B"} and models["A"].l_ms < models["B"].l_ms
    best = sorted(ctx.report("path_best").collect(), key=lambda r: r.size_from)
    assert [r.best_path for r in best] == ["A", "B"]
    split = ctx.report("path_split").collect()
    assert len(split) == len(cfg.active.split_message_bytes)
    assert all(r.bytes_a + r.bytes_b == pytest.approx(r.message_bytes) for r in split)
