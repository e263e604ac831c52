"""The Peering reports (issue 33, jobs/peering.py) on small hand-made Spark frames: each
expected value is computed here from the rows themselves; and the job run whole (runner,
lake, declared columns) on a lake whose flows predate the routing columns."""
from __future__ import annotations

import datetime as dt
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import StructType

from flowlake.jobs import common, runner
from flowlake.jobs.peering import PEAK_SECONDS, exit_paths, peering_candidates, peering_traffic
from flowlake.schemas import FLOWS_TABLE

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from test_jobs import private_cfg  # noqa: E402

from flow_rows import lake_row  # noqa: E402

pytestmark = pytest.mark.integration
UTC = dt.UTC
DAY = dt.date(2026, 3, 12)
LOCAL = ["10.0.0.0/8"]

# outbound (local -> remote) flows with routes, one inbound, one without a route
SPECS = [
    {"hour": 10, "minute": 1, "dst": "198.18.0.9", "path": [64501, 64601], "comms": ["65401:10"],
     "large": ["64501:1:2"], "dst_as": 64601, "nh": "192.0.2.1", "bytes": 1000, "packets": 10,
     "out_provider": "cogent"},
    {"hour": 10, "minute": 2, "dst": "198.18.0.10", "path": [64501, 64601], "comms": ["65401:10", "65401:1000"],
     "dst_as": 64601, "nh": "192.0.2.1", "bytes": 3000, "packets": 30, "out_provider": "cogent"},
    {"hour": 10, "minute": 30, "dst": "198.18.4.9", "path": [64502, 64650, 4200000000], "comms": [],
     "dst_as": 4200000000, "nh": "192.0.2.2", "bytes": 500, "packets": 5, "out_provider": "telia"},
    {"hour": 11, "minute": 1, "dst": "198.18.5.9", "path": [64700], "comms": ["65402:7"], "dst_as": 64700,
     "nh": "192.0.2.3", "bytes": 700, "packets": 7, "out_provider": "ams-ix"},  # a direct peer: no transit
    {"hour": 11, "minute": 2, "dst": "198.18.0.11", "path": [64502, 64601], "comms": [], "dst_as": 64601,
     "nh": "192.0.2.2", "bytes": 2000, "packets": 20, "out_provider": "telia"},
    {"hour": 11, "minute": 3, "src": "203.0.113.5", "dst": "10.0.0.7", "path": [], "comms": [], "src_as": 65010,
     "bytes": 400, "packets": 4, "in_provider": "cogent"},  # inbound
    {"hour": 11, "minute": 4, "dst": "198.51.100.1", "path": [], "comms": [], "bytes": 90, "packets": 1},  # no route
]


def frame(spark, specs: list[dict], routed: bool = True):
    rows = []
    for i, s in enumerate(specs):
        ts = dt.datetime(2026, 3, 12, s["hour"], s["minute"], tzinfo=UTC)
        given = {"time_start": ts, "time_end": ts, "exporter": "192.0.2.100", "src_addr": s.get("src", "10.0.0.1"),
                 "dst_addr": s["dst"], "src_port": 40000 + i, "dst_port": 443, "proto": 6, "packets": s["packets"],
                 "bytes": s["bytes"], "src_as": s.get("src_as", 0), "dst_as": s.get("dst_as", 0),
                 "source_file": "t", "file_seq": i, "date": DAY.isoformat(), "hour": ts.hour,
                 "in_if_provider": s.get("in_provider", ""), "out_if_provider": s.get("out_provider", ""),
                 "bgp_next_hop": s.get("nh")}
        if routed:
            given.update(dst_as_path=s["path"], dst_communities=s["comms"], dst_large_communities=s.get("large", []))
        rows.append(lake_row(**given))
    df = spark.createDataFrame(rows, StructType(FLOWS_TABLE.spark_schema().fields))
    if not routed:
        df = df.drop("dst_as_path", "dst_communities", "dst_large_communities")
    return common.with_direction(df, LOCAL)


def _direction(s: dict) -> str:
    return "inbound" if "src" in s else "outbound"


def test_peering_traffic_by_each_dimension(spark):
    got = {(r.hour, r.direction, r.dimension, r.key): (r.flows, r.packets, r.bytes, r.bytes_share)
           for r in peering_traffic(frame(spark, SPECS)).collect()}
    want: dict = defaultdict(lambda: [0, 0, 0])

    def add(s, dimension, key):
        for hour in (s["hour"], None):
            for d in (_direction(s), "all"):
                w = want[(hour, d, dimension, key)]
                w[0], w[1], w[2] = w[0] + 1, w[1] + s["packets"], w[2] + s["bytes"]

    for s in SPECS:
        if s["path"]:
            add(s, "neighbour_as", str(s["path"][0]))
        if len(s["path"]) >= 2:
            add(s, "transit", str(s["path"][0]))
        origin = s.get("src_as", 0) if _direction(s) == "inbound" else s.get("dst_as", 0)
        if origin:
            add(s, "origin_as", str(origin))
        for c in s["comms"] + s.get("large", []):
            add(s, "community", c)
        provider = s.get("in_provider") if _direction(s) == "inbound" else s.get("out_provider")
        if provider:
            add(s, "provider", provider)
    assert {k: v[:3] for k, v in got.items()} == {k: tuple(v) for k, v in want.items()}
    for (hour, d, dimension, _), (_, _, b, share) in got.items():
        total = sum(v[2] for k, v in want.items() if k[0] == hour and k[1] == d and k[2] == dimension)
        assert share == pytest.approx(b / total)
    # the neighbour 64501 carried flows 0 and 1 (4000 bytes) out of the day's routed 7200
    assert got[(None, "all", "neighbour_as", "64501")][2] == 4000


def test_peering_candidates_are_the_destinations_behind_transit(spark):
    rows = {r.origin_as: r for r in peering_candidates(frame(spark, SPECS)).collect()}
    transit = [s for s in SPECS if len(s["path"]) >= 2]
    origins = {s["path"][-1] for s in transit}
    assert set(rows) == origins and 64700 not in rows  # a direct peer is no candidate
    total = sum(s["bytes"] for s in transit)
    for origin, r in rows.items():
        mine = [s for s in transit if s["path"][-1] == origin]
        by_nb: dict = defaultdict(int)
        buckets: dict = defaultdict(int)
        for s in mine:
            by_nb[s["path"][0]] += s["bytes"]
            t = dt.datetime(2026, 3, 12, s["hour"], s["minute"], tzinfo=UTC).timestamp()
            buckets[int(t // PEAK_SECONDS) * PEAK_SECONDS] += s["bytes"]
        assert (r.flows, r.bytes, r.packets) == (len(mine), sum(s["bytes"] for s in mine),
                                                 sum(s["packets"] for s in mine))
        assert r.transit_as == max(by_nb, key=lambda k: (by_nb[k], -k)) and r.transit_count == len(by_nb)
        peak = max(buckets.items(), key=lambda kv: (kv[1], -kv[0]))
        assert r.peak_bps == pytest.approx(peak[1] * 8 / PEAK_SECONDS)
        assert r.peak_time.replace(tzinfo=UTC).timestamp() == peak[0] if r.peak_time.tzinfo is None \
            else r.peak_time.timestamp() == peak[0]
        assert r.path_length == pytest.approx(sum(len(s["path"]) * s["bytes"] for s in mine) / r.bytes)
        assert r.bytes_share == pytest.approx(r.bytes / total)
    assert rows[64601].rank == 1 and rows[64601].transit_as == 64501  # 4000 via 64501, 2000 via 64502


def test_exit_paths_share(spark):
    got = {(r.hour, r.exporter, r.bgp_next_hop, r.neighbour_as): (r.bytes, r.bytes_share)
           for r in exit_paths(frame(spark, SPECS)).collect()}
    routed = [s for s in SPECS if s["path"]]
    want: dict = defaultdict(int)
    for s in routed:
        for hour in (s["hour"], None):
            want[(hour, "192.0.2.100", s.get("nh") or "", s["path"][0])] += s["bytes"]
    assert {k: v[0] for k, v in got.items()} == dict(want)
    for k, (b, share) in got.items():
        assert share == pytest.approx(b / sum(v for kk, v in want.items() if kk[0] == k[0]))


def test_flows_before_the_routing_columns_give_no_route(spark):
    f = frame(spark, SPECS, routed=False)
    assert peering_candidates(f).count() == 0 and exit_paths(f).count() == 0
    dims = {r.dimension for r in peering_traffic(f).collect()}
    assert dims == {"origin_as", "provider"}


def test_the_job_runs_whole_on_a_lake(spark, tmp_path):
    cfg = private_cfg(tmp_path)
    day = DAY.isoformat()
    f = frame(spark, SPECS).drop("direction")
    f.write.partitionBy("date", "hour").parquet(str(cfg.lake / "flows"))
    out = runner.run_jobs(spark, cfg, DAY, runner.order(runner.discover(), ["peering"]))
    assert [(o.job, o.status, o.error) for o in out] == [("peering", "ok", "")]
    for table in ("peering_traffic", "peering_candidates", "exit_paths"):
        got = pq.read_table(cfg.lake / "reports" / table / f"date={day}")
        assert got.num_rows > 0, table


def test_peering_traffic_keeps_the_top_n_and_folds_the_rest(spark):
    """Per hour, direction and dimension the top_n keys by bytes; the rest in one '(other)'
    row: the lists add up to the same traffic as unbounded, the shares to 1."""
    f = frame(spark, SPECS)
    full = {(r.hour, r.direction, r.dimension, r.key): (r.flows, r.packets, r.bytes)
            for r in peering_traffic(f, top_n=1000).collect()}
    got = {(r.hour, r.direction, r.dimension, r.key): (r.flows, r.packets, r.bytes, r.bytes_share)
           for r in peering_traffic(f, top_n=1).collect()}
    groups = {k[:3] for k in full}
    for g in groups:
        want = sorted(((v, k[3]) for k, v in full.items() if k[:3] == g), key=lambda x: (-x[0][2], x[1]))
        rows = {k[3]: v for k, v in got.items() if k[:3] == g}
        top_key = want[0][1]
        assert rows[top_key][:3] == want[0][0], g
        rest = [v for v, _ in want[1:]]
        if rest:
            assert set(rows) == {top_key, "(other)"}, g
            assert rows["(other)"][:3] == tuple(sum(x[i] for x in rest) for i in range(3)), g
        else:
            assert set(rows) == {top_key}, g
        assert sum(v[3] for v in rows.values()) == pytest.approx(1.0), g
    # the day's outbound communities: 65401:10 (4000 bytes) kept; 65401:1000, 64501:1:2, 65402:7 folded
    assert got[(None, "outbound", "community", "65401:10")][2] == 4000
    assert got[(None, "outbound", "community", "(other)")][2] == 3000 + 1000 + 700
    with pytest.raises(ValueError, match="peering_top_n"):
        peering_traffic(f, top_n=0)
