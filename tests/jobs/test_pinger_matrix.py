"""pinger_matrix: a whole run over a small hand-made lake of active RTT tests with known
medians, IQRs and losses, and the quality bands at their edges."""
from __future__ import annotations

import datetime as dt
import logging
import math
import os

import pytest

from flowlake.base import config
from flowlake.jobs import pinger_matrix, pinger_regions
from flowlake.jobs.context import JobContext
from flowlake.schemas.active import ACTIVE

DAY = dt.date(2026, 11, 20)
REGIONS = """host,site,country,region
pinger.slac.stanford.edu,SLAC,US,North America
mon2.fnal.gov,FNAL,US,North America
ping.cern.ch,CERN,CH,Europe
PING.KEK.JP,KEK,JP,East Asia
"""


def rtt_test(src, dst, day, minute, sent, received, median=None, jitter=None, avg=None):
    m = {"sent": float(sent), "received": float(received)}
    if median is not None:
        m.update(rtt_median_ms=float(median), rtt_avg_ms=float(avg if avg is not None else median),
                 rtt_min_ms=float(median) - 1, rtt_max_ms=float(median) + 1)
    if jitter is not None:
        m["jitter_ms"] = float(jitter)
    start = dt.datetime.combine(day, dt.time(10, minute), dt.timezone.utc)
    return ("rtt", src, dst, start, start + dt.timedelta(seconds=10), {}, m, "probe", "", day.isoformat())


SLAC, FNAL, CERN, KEK = "pinger.slac.stanford.edu", "mon2.fnal.gov", "ping.cern.ch", "ping.kek.jp"
ROWS = [
    # North America -> Europe today: medians 150/160/170, IQRs 60/90/120, one reply lost of 30
    rtt_test(SLAC, CERN, DAY, 0, 10, 10, 150, 60.0), rtt_test(SLAC, CERN, DAY, 30, 10, 9, 160, 90.0),
    rtt_test(FNAL, CERN, DAY, 45, 10, 10, 170, 120.0),
    # ... and earlier this month: only in the month's cell (loss 1 of 40 = 2.5 %: a band edge)
    rtt_test(SLAC, CERN, dt.date(2026, 11, 3), 0, 10, 10, 200, 250.0),
    # last month: in neither
    rtt_test(SLAC, CERN, dt.date(2026, 10, 31), 0, 10, 0),
    # North America -> East Asia: one sample unreachable, one clean (host case differs from the map)
    rtt_test(FNAL, "PING.kek.jp", DAY, 5, 10, 0), rtt_test(FNAL, KEK, DAY, 6, 10, 10, 100, 0.5),
    # a target nobody mapped
    rtt_test(SLAC, "mystery.example.org", DAY, 7, 10, 10, 40, 0.2),
]


@pytest.fixture
def lake_cfg(spark, tmp_path):
    regions = tmp_path / "regions.csv"
    regions.write_text(REGIONS)
    cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(tmp_path / "home"),
                           "FLOWLAKE_PINGER_REGIONS": str(regions)})
    (spark.createDataFrame(ROWS, ACTIVE.spark_schema()).write.partitionBy("date")
     .parquet(str(cfg.lake / "active")))
    return cfg


@pytest.mark.integration
def test_matrix_from_a_small_lake(spark, lake_cfg, caplog):
    ctx = JobContext(spark=spark, cfg=lake_cfg, date=DAY)
    ctx.shared = {}
    with caplog.at_level(logging.WARNING, logger="flowlake.jobs.pinger_matrix"):
        pinger_matrix.run(ctx)
    # the unknown host is named in the job's log; nothing else is
    assert "mystery.example.org" in caplog.text and "ping.kek.jp" not in caplog.text.lower()
    rows = spark.read.parquet(str(lake_cfg.lake / "reports" / "pinger_matrix" / f"date={DAY}")).collect()
    cell = {(r.period, r.src_region, r.dst_region): r for r in rows}
    assert set(cell) == {(p, "North America", d) for p in ("day", "month")
                         for d in ("Europe", "East Asia", "unknown")}
    assert {r.month for r in rows} == {"2026-11"}

    eu = cell[("day", "North America", "Europe")]
    assert eu.samples == 3 and eu.rtt_median_ms == pytest.approx(160.0)
    assert eu.ipdv_iqr_ms == pytest.approx(90.0)
    assert eu.loss_pct == pytest.approx(100 / 30) and eu.unreachable_pct == 0
    rtt_avg = (150 * 10 + 160 * 9 + 170 * 10) / 29 / 1000  # reply-weighted mean RTT, s
    assert eu.throughput_mbps == pytest.approx(1460 * 8 / rtt_avg / math.sqrt(1 / 30) / 1e6)
    # 160 ms: Yellow (128-256); 3.3 % loss: poor (2.5-5); IPDV IQR 90 ms: medium (75-125)
    assert (eu.rtt_band, eu.loss_band, eu.ipdv_band) == ("Yellow", "poor", "medium")

    eu_m = cell[("month", "North America", "Europe")]
    assert eu_m.samples == 4 and eu_m.rtt_median_ms == pytest.approx(165.0)  # median of 150,160,170,200
    assert eu_m.ipdv_iqr_ms == pytest.approx(130.0) and eu_m.loss_pct == pytest.approx(2.5)
    assert eu_m.loss_band == "poor"  # 2.5 % is the edge: the band above it
    assert (eu_m.rtt_band, eu_m.ipdv_band) == ("Yellow", "poor")  # IPDV IQR 130 ms: poor (125-225)

    asia = cell[("day", "North America", "East Asia")]
    assert asia.samples == 2 and asia.unreachable_pct == pytest.approx(50.0) and asia.loss_pct == pytest.approx(50.0)
    assert asia.rtt_median_ms == pytest.approx(100.0) and asia.ipdv_iqr_ms == pytest.approx(0.5)
    assert (asia.rtt_band, asia.loss_band, asia.ipdv_band) == ("Green", "bad", "good")
    assert asia.throughput_mbps == pytest.approx(1460 * 8 / 0.1 / math.sqrt(0.5) / 1e6)

    unk = cell[("day", "North America", "unknown")]
    assert unk.loss_pct == 0 and unk.rtt_band == "White" and unk.loss_band == "excellent"
    # zero loss: p = 1/(sent+1) ([active] zero_loss_rule = upper_bound)
    assert unk.throughput_mbps == pytest.approx(1460 * 8 / 0.040 / math.sqrt(1 / 11) / 1e6)


# The default bands, written out from their sources (not from flowlake.toml), with values on
# both sides of every edge; at an edge a value is in the band above it.
# Loss: PingER's tutorial (tutorial.html#loss; also pinger/uses.html, wan-mon/ral.html):
# excellent < 0.1 %, good < 1 %, acceptable < 2.5 %, poor < 5 %, very poor < 12 %, bad from 12 %.
# RTT: SLAC's PAM 2001 talk (Cottrell et al., "Passive and active monitoring on a high-performance
# network"), region to region: White 0-64, Green 64-128, Yellow 128-256, Pink 256-512, Red > 512 ms.
# IPDV (jitter = IQR of ipdv): the same talk after ETSI DTR/TIPHON-05001 V1.2.5 (1998-09):
# 75 ms good, 125 ms medium, 225 ms poor (each the limit of its band); at or above 225 ms "bad",
# flowlake's name for what ETSI leaves unnamed.
CITED = {
    "loss": ([0.1, 1.0, 2.5, 5.0, 12.0], ["excellent", "good", "acceptable", "poor", "very poor", "bad"],
             [(0.0, "excellent"), (0.099, "excellent"), (0.1, "good"), (0.99, "good"), (1.0, "acceptable"),
              (2.49, "acceptable"), (2.5, "poor"), (4.99, "poor"), (5.0, "very poor"), (11.99, "very poor"),
              (12.0, "bad"), (100.0, "bad")]),
    "rtt": ([64.0, 128.0, 256.0, 512.0], ["White", "Green", "Yellow", "Pink", "Red"],
            [(0.0, "White"), (30.0, "White"), (63.99, "White"), (64.0, "Green"), (100.0, "Green"),
             (127.99, "Green"), (128.0, "Yellow"), (200.0, "Yellow"), (255.99, "Yellow"), (256.0, "Pink"),
             (400.0, "Pink"), (511.99, "Pink"), (512.0, "Red"), (600.0, "Red"), (5000.0, "Red")]),
    "ipdv": ([75.0, 125.0, 225.0], ["good", "medium", "poor", "bad"],
             [(0.0, "good"), (10.0, "good"), (74.99, "good"), (75.0, "medium"), (100.0, "medium"),
              (124.99, "medium"), (125.0, "poor"), (200.0, "poor"), (224.99, "poor"), (225.0, "bad"),
              (1000.0, "bad")]),
}


@pytest.mark.integration
@pytest.mark.parametrize("metric", sorted(CITED))
def test_default_bands_are_the_cited_ones(spark, cfg, metric):
    """The defaults are the cited edges and names, and the band expression puts each of the
    sources' example values (both sides of every edge) in the band the source gives it."""
    from pyspark.sql import functions as F

    want_edges, want_names, table = CITED[metric]
    edges, names = pinger_matrix.bands_of(cfg, metric)
    assert (edges, names) == (want_edges, want_names)
    # the table itself tests every edge from both sides
    for edge in want_edges:
        assert any(v < edge for v, _ in table) and any(v == edge for v, _ in table), edge
    values = [*table, (None, None)]
    df = spark.createDataFrame([(i, v) for i, (v, _) in enumerate(values)], "i int, v double")
    got = [r.b for r in df.select("i", pinger_matrix.band(F.col("v"), edges, names).alias("b")).orderBy("i").collect()]
    assert list(zip([v for v, _ in values], got)) == values


def test_bands_configurable_and_checked(tmp_path):
    env = {**os.environ, "FLOWLAKE_PINGER_LOSS_BAND_EDGES_PCT": "1,5", "FLOWLAKE_PINGER_LOSS_BAND_NAMES": "ok,meh,bad"}
    assert pinger_matrix.bands_of(config.load(env=env), "loss") == ([1.0, 5.0], ["ok", "meh", "bad"])
    with pytest.raises(ValueError, match="give one more name than edges"):
        pinger_matrix.bands_of(config.load(env={**env, "FLOWLAKE_PINGER_LOSS_BAND_NAMES": "ok,bad"}), "loss")
    with pytest.raises(ValueError, match="edges must increase"):
        pinger_matrix.bands_of(config.load(env={**env, "FLOWLAKE_PINGER_LOSS_BAND_EDGES_PCT": "5,1"}), "loss")


def test_regions_file_errors_name_file_and_line(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("host,site,region\nh,s,r\n")
    with pytest.raises(pinger_regions.RegionsError, match=f"{p}:1: .*lacks column\\(s\\) country"):
        pinger_regions.read(p)
    p.write_text("host,site,country,region\na,s,c,Europe\nb,s,c,\n")
    with pytest.raises(pinger_regions.RegionsError, match=f"{p}:3: host and region must not be empty"):
        pinger_regions.read(p)
    p.write_text("host,site,country,region\na,s,c,Europe\nA,s,c,Asia\n")
    with pytest.raises(pinger_regions.RegionsError, match=f"{p}:3: host A already mapped"):
        pinger_regions.read(p)
    with pytest.raises(pinger_regions.RegionsError, match="cannot read"):
        pinger_regions.read(tmp_path / "missing.csv")


@pytest.mark.integration
def test_status_counts_mapped_and_unknown_hosts(spark, lake_cfg, tmp_path):
    import json
    import subprocess
    import sys

    env = {**os.environ, "FLOWLAKE_HOME": str(lake_cfg.home_dir), "FLOWLAKE_PINGER_REGIONS": str(tmp_path / "regions.csv"),
           "FLOWLAKE_KAFKA_PORT": "1"}
    res = subprocess.run([sys.executable, "-m", "flowlake.cli", "status", "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    st = json.loads(res.stdout)["pinger"]
    # the newest day of active results (2026-11-20): six host names, one unmapped
    assert (st["date"], st["hosts_in_file"], st["hosts_seen"], st["mapped"], st["unknown"]) == (
        "2026-11-20", 4, 6, 5, 1)
    assert st["unknown_hosts"] == ["mystery.example.org"]
    table = subprocess.run([sys.executable, "-m", "flowlake.cli", "status"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert "5 of 6 hosts mapped" in table.stdout and "mystery.example.org" in table.stdout


@pytest.mark.integration
def test_daily_set_runs_them_on_an_empty_date(spark, tmp_path):
    """In the daily job set: a date without flows or active results writes empty tables
    (behaviour_classes: every class with zeros), and nothing fails."""
    import pyarrow.parquet as pq

    from flowlake.jobs import runner

    cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(tmp_path / "home")})
    found = runner.discover()
    mine = ["pinger_matrix", "behaviour_classes", "behaviour_needs"]
    outcomes = runner.run_jobs(spark, cfg, dt.date(2026, 3, 1), runner.order(found, mine))
    # behaviour_needs right after behaviour_classes (it depends on it: the classes' cache freed early)
    assert [(o.job, o.status) for o in outcomes] == [(n, "ok") for n in ("behaviour_classes", "behaviour_needs",
                                                                           "pinger_matrix")], outcomes
    part = lambda t: pq.read_table(cfg.lake / "reports" / t / "date=2026-03-01")  # noqa: E731
    assert part("pinger_matrix").num_rows == 0 and part("behaviour_needs").num_rows == 0
    classes = part("behaviour_classes").to_pylist()
    assert len(classes) == 9 and all(r["flows"] == r["bytes"] == 0 for r in classes)
