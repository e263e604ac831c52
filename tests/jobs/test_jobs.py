"""Daily report jobs (issue 4): pure transforms on hand-made frames, cross-checked
against independent references (Python's ipaddress, numpy), and the whole run checked
against nfdump's own top-N statistics over real nfcapd files (softflowd -> nfcapd)."""
from __future__ import annotations

import datetime as dt
import ipaddress
import math
import os
import random
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import nfcapd_capture
from conftest import run

LOCAL = ["10.0.0.0/8", "192.0.2.0/24", "198.51.100.0/24", "2001:db8::/32"]
UTC = dt.timezone.utc


# ---- helpers ----------------------------------------------------------------------------
def flow_rows(rows):
    """Hand-made flows: dicts with defaults for every FLOWS_TABLE column."""
    out = []
    for i, r in enumerate(rows):
        ts = r.get("ts", dt.datetime(2026, 3, 10, 10, 0, tzinfo=UTC))
        base = {"time_start": ts, "time_end": r.get("te", ts), "exporter": "127.0.0.1", "input_if": 1,
                "output_if": 2, "src_addr": "10.0.0.1", "dst_addr": "203.0.113.1", "src_port": 40000 + i,
                "dst_port": 443, "proto": 6, "tcp_flags": 0, "tos": 0, "packets": 1, "bytes": 100,
                "sampling_rate": 1, "src_as": 0, "dst_as": 0, "source_file": "t", "file_seq": i,
                "date": ts.date().isoformat(), "hour": ts.hour}
        base.update({k: v for k, v in r.items() if k not in ("ts", "te")})
        out.append(base)
    return out


def frame(spark, rows, direction=True):
    from flowlake.jobs import common
    from flowlake.schemas import FLOWS_TABLE

    df = spark.createDataFrame(flow_rows(rows), FLOWS_TABLE.spark_schema())
    return common.with_direction(df, LOCAL) if direction else df


def private_cfg(tmp_path: Path, **env):
    from flowlake.base import config

    return config.load(env={**os.environ, "FLOWLAKE_HOME": str(tmp_path), **env})


# ---- direction --------------------------------------------------------------------------
@pytest.mark.integration
def test_spark_driver_works_in_flowlake_s_scratch_folder(spark, cfg):
    """Spark 4.0 puts a folder per session under ./artifacts of the driver's working
    directory; the driver starts in $FLOWLAKE_HOME/tmp/spark, so the folder a user runs
    flowlake from stays clean while this process keeps its own working directory."""
    spark.range(3).count()  # a session in use has its artifact folder
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    scratch = cfg.path("tmp", "spark")
    assert Path(os.readlink(f"/proc/{pid}/cwd")) == scratch
    assert (scratch / "artifacts").is_dir()
    assert Path.cwd() != scratch


@pytest.mark.integration
def test_spark_driver_logs_warnings_without_start_up_noise(spark):
    """The driver logs with flowlake/log4j2.properties: warnings and errors, less two
    start-up notes printed at every run (no native Hadoop library; the spark.local.dir
    notice) and two notes on deliberate choices (a small list ranked in one partition, a
    plan's text shortened), while the loggers' other warnings still show."""
    from flowlake.base.spark import LOG4J

    jvm = spark.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    conf = log4j.LogManager.getContext(False).getConfiguration()
    assert conf.getConfigurationSource().getLocation() == str(LOG4J)

    def event(logger, msg):
        return (log4j.core.impl.Log4jLogEvent.newBuilder().setLoggerName(logger).setLevel(log4j.Level.WARN)
                .setMessage(log4j.message.SimpleMessage(msg)).build())

    sparkconf = "org.apache.spark.SparkConf"
    assert conf.getLoggerConfig(sparkconf).isFiltered(event(sparkconf, (
        "Note that spark.local.dir will be overridden by the value set by the cluster manager "
        "(via SPARK_LOCAL_DIRS in standalone/kubernetes and LOCAL_DIRS in YARN).")))
    assert not conf.getLoggerConfig(sparkconf).isFiltered(event(sparkconf, "The configuration key 'x' is deprecated"))
    assert not log4j.LogManager.getLogger("org.apache.hadoop.util.NativeCodeLoader").isWarnEnabled()
    # a small list ranked whole (peering candidates): 49 lines of the daily set's output; other
    # warnings of the window operator still show
    window = "org.apache.spark.sql.execution.window.WindowExec"
    assert conf.getLoggerConfig(window).isFiltered(event(window, (
        "No Partition Defined for Window operation! Moving all data to a single partition, this can "
        "cause serious performance degradation.")))
    assert not conf.getLoggerConfig(window).isFiltered(event(window, "some other warning"))
    plan = "org.apache.spark.sql.catalyst.util.SparkStringUtils"
    assert conf.getLoggerConfig(plan).isFiltered(event(plan, (
        "Truncated the string representation of a plan since it was too large. This behavior can "
        "be adjusted by setting 'spark.sql.debug.maxToStringFields'.")))
    scheduler = log4j.LogManager.getLogger("org.apache.spark.scheduler.TaskSetManager")
    assert scheduler.isWarnEnabled() and not scheduler.isInfoEnabled()


@pytest.mark.integration
def test_direction_matches_ipaddress(spark, tmp_path):
    from flowlake.jobs import common

    prefixes = LOCAL + ["172.16.0.0/12", "2001:db8:8000::/33", "fd00:1:2:3::/64", "fd12:3400::/23"]
    nets = [ipaddress.ip_network(p) for p in prefixes]
    rng = random.Random(7)
    addrs = ["10.0.0.0", "10.255.255.255", "11.0.0.0", "9.255.255.255", "192.0.2.255", "192.0.3.0",
             "172.31.255.255", "172.32.0.0", "::", "::1", "2001:db8::", "2001:DB8::1", "2001:db9::1",
             "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "fd00:1:2:3::", "fd00:1:2:4::1", "::ffff:10.1.2.3",
             "::ffff:8.8.8.8", "fd00:1:2:3:0:0:0:9", "not-an-address", ""]
    for _ in range(300):
        net = rng.choice(nets)
        host = int(net.network_address) + rng.randrange(net.num_addresses)
        jitter = rng.choice([0, 0, 1 << rng.randrange(net.max_prefixlen)])
        addrs.append(str(ipaddress.ip_address((host ^ jitter) % (1 << net.max_prefixlen))))
    addrs += [str(ipaddress.IPv4Address(rng.getrandbits(32))) for _ in range(50)]
    addrs += [str(ipaddress.IPv6Address(rng.getrandbits(128) >> rng.choice([0, 64, 100]))) for _ in range(50)]

    def expected(a):
        try:
            ip = ipaddress.ip_address(a)
        except ValueError:
            return False
        if ip.version == 6 and ip.ipv4_mapped:
            ip = ip.ipv4_mapped
        return any(ip in n for n in nets if n.version == ip.version)

    df = spark.createDataFrame([(a,) for a in addrs], "a string")
    got = dict(common.add_local_flag(df, "a", "local", prefixes).select("a", "local").collect())
    wrong = {a: got[a] for a in addrs if got[a] != expected(a)}
    assert not wrong
    assert sum(got.values()) > 100 and sum(not v for v in got.values()) > 100  # both sides exercised

    # the Go kernel of the local top_talkers engine decides locality by the same rules:
    # each address sends one flow to a remote host, so its pair is outbound or transit
    import duckdb

    from flowlake.jobs import top_talkers_local

    odd = ["010.0.0.9", "+10.0.0.5", " 10.3.3.3 ", "10.0.0.1.", "10.0.0", "256.1.1.1", "2001:db8::1::2",
           "2001:db8:8000:0:0:0:0:0:1", "2001:DB8:8000::", "::ffff:172.16.0.1", "fd00:1:2:3::/64", "1.2.3.4:80"]
    got_odd = dict(common.add_local_flag(spark.createDataFrame([(a,) for a in odd], "a string"), "a", "local",
                                         prefixes).select("a", "local").collect())
    spark_local = {**got, **got_odd}
    part = tmp_path / "hour=07"
    part.mkdir()
    n = len(spark_local)
    pq.write_table(pa.table({"src_addr": list(spark_local), "dst_addr": ["8.8.8.8"] * n,
                             "bytes": list(range(n, 0, -1)), "packets": [1] * n}), part / "part-0.parquet")
    lists = top_talkers_local.top_talkers(duckdb.connect(), [str(part / "part-0.parquet")], prefixes, n)
    kernel = {r["src_addr"]: r["direction"] == "outbound" for r in lists.to_pylist()
              if r["by"] == "pair" and r["metric"] == "bytes" and r["hour"] is None and r["direction"] != "all"}
    assert kernel == spark_local


@pytest.mark.integration
def test_day_direction_by_duckdb_equals_the_spark_rule(spark, tmp_path):
    """On this machine the jobs label `direction` by joining the day's local addresses, which
    DuckDB decides once per run (common.local_addresses); the Spark rule (with_direction) is
    the reference: every flow gets the same label, odd address texts included."""
    from flow_rows import lake_row
    from flowlake.jobs import common
    from flowlake.jobs.context import JobContext
    from flowlake.pipelines.lake_read import LakeReader
    from flowlake.schemas import FLOWS_TABLE

    prefixes = LOCAL + ["172.16.0.0/12", "fd00:1:2:3::/64"]
    cfg = private_cfg(tmp_path, FLOWLAKE_SITE_LOCAL_PREFIXES=",".join(prefixes))
    assert list(cfg.site.local_prefixes) == prefixes
    rng = random.Random(3)
    addrs = ["10.0.0.0", "11.0.0.0", "192.0.2.255", "172.31.255.255", "::", "2001:db8::", "2001:DB8::1",
             "2001:db9::1", "fd00:1:2:3::9", "::ffff:10.1.2.3", "::ffff:8.8.8.8", "::ffff:a01:203", "010.0.0.9",
             "+10.0.0.5", " 10.3.3.3 ", "10.0.0.1.", "256.1.1.1", "not-an-address", ""]
    addrs += [str(ipaddress.IPv4Address(rng.choice([0x0A000000, 0xC0000200, 0x08080800]) + rng.randrange(256)))
              for _ in range(60)]
    day = dt.date(2026, 3, 12)
    ts = dt.datetime(2026, 3, 12, 7, tzinfo=dt.UTC)
    rows = [lake_row(time_start=ts, time_end=ts, exporter="192.0.2.100", src_addr=a, dst_addr=rng.choice(addrs),
                     src_port=1, dst_port=2, proto=6, packets=1, bytes=1, source_file="t", file_seq=i,
                     date=day.isoformat(), hour=7) for i, a in enumerate(addrs * 3)]
    spark.createDataFrame(rows, FLOWS_TABLE.spark_schema()).write.partitionBy("date", "hour").parquet(
        str(cfg.lake / "flows"))
    ctx = JobContext(spark=spark, cfg=cfg, date=day, snapshot=LakeReader(cfg.lake))
    ctx.shared = {}
    try:
        assert common.local_addresses(ctx) is not None  # the join path, not the fallback
        flows = ctx.flows()
        got = {r.file_seq: r.direction for r in common.day_direction(ctx, flows).collect()}
        want = {r.file_seq: r.direction for r in common.with_direction(flows, prefixes).collect()}
    finally:
        for v in ctx.shared.values():
            v.unpersist()
        ctx.snapshot.close()
    assert len(got) == len(rows) and got == want
    assert set(want.values()) == {"internal", "outbound", "inbound", "transit"}


@pytest.mark.integration
def test_direction_labels(spark):
    df = frame(spark, [{"src_addr": "10.1.1.1", "dst_addr": "8.8.8.8"}, {"src_addr": "8.8.8.8", "dst_addr": "2001:db8::5"},
                       {"src_addr": "192.0.2.1", "dst_addr": "10.0.0.9"}, {"src_addr": "1.1.1.1", "dst_addr": "2001:db9::1"}])
    assert [r.direction for r in df.orderBy("file_seq").collect()] == ["outbound", "inbound", "internal", "transit"]


# ---- port map and app labels -------------------------------------------------------------
def test_port_map_defaults_and_errors(tmp_path):
    from flowlake.pipelines import port_map

    m = port_map.load()
    assert m[(6, 5021)] == "bbftp" and m[(6, 2811)] == "gridftp" and m[(17, 5201)] == "iperf3"
    assert m[(17, 7000)] == m[(17, 7009)] == "afs" and (17, 7010) not in m
    assert m[(17, 161)] == "snmp" and m[(6, 1935)] == "rtmp" and m[(6, 554)] == "rtsp"

    extra = tmp_path / "ports.csv"
    extra.write_text("port,proto,service\n# site specific\n9999,udp,telemetry\n443,tcp,web\n")
    m2 = port_map.load(extra)
    assert m2[(17, 9999)] == "telemetry" and m2[(6, 443)] == "web" and m2[(6, 5021)] == "bbftp"

    cases = {"1,tcp,a\n70000,tcp,big\n": ("line 2", "port"), "1,tcp,a\n\n5-2,udp,x\n": ("line 3", "range"),
             "22,ftp,ssh\n": ("line 1", "proto"), "22,tcp\n": ("line 1", "3 fields"), "x,tcp,y\n": ("line 1", "port"),
             "22,tcp,\n": ("line 1", "service")}
    for text, (line, word) in cases.items():
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        with pytest.raises(port_map.PortMapError) as err:
            port_map.load(bad)
        assert str(bad) in str(err.value) and line in str(err.value) and word in str(err.value), str(err.value)


@pytest.mark.integration
def test_app_labels(spark):
    from flowlake.jobs import common
    from flowlake.pipelines import port_map

    rows = [{"dst_port": 5021}, {"src_port": 2811, "dst_port": 51000}, {"proto": 17, "dst_port": 7004},
            {"proto": 17, "src_port": 33000, "dst_port": 161}, {"proto": 1, "src_port": 0, "dst_port": 2048},
            {"dst_port": 33333, "src_port": 50000}, {"proto": 17, "src_port": 60000, "dst_port": 61000},
            {"proto": 47, "src_port": 0, "dst_port": 0}, {"dst_port": 1935}]
    df = common.with_app(frame(spark, rows), port_map.load())
    got = [r.app for r in df.orderBy("file_seq").collect()]
    assert got == ["bbftp", "gridftp", "afs", "snmp", "icmp", "other-tcp-registered", "other-udp-dynamic", "gre", "rtmp"]


# ---- top talkers ------------------------------------------------------------------------
@pytest.mark.integration
def test_top_talkers_rank_share_ties_and_change(spark):
    from flowlake.jobs import top_talkers as tt

    t = dt.datetime(2026, 3, 10, 10, 0, tzinfo=UTC)
    rows = ([{"src_addr": "10.0.0.1", "bytes": 500, "packets": 5}] * 2 + [{"src_addr": "10.0.0.2", "bytes": 1000, "packets": 3}]
            + [{"src_addr": "10.0.0.3", "bytes": 1000, "packets": 3}] + [{"src_addr": "8.8.8.8", "dst_addr": "10.0.0.1", "bytes": 10,
                                                                        "ts": t + dt.timedelta(hours=2)}])
    out = tt.top_talkers(frame(spark, rows), top_n=2).where("by = 'src'").collect()
    day_all = sorted((r.metric, r.rank, r.src_addr, r.bytes, r.flows, round(r.share, 6)) for r in out
                     if r.hour is None and r.direction == "all")
    # bytes: 1000 twice and 1000 for 10.0.0.1 (2 flows): tie on bytes, broken by packets then flows
    assert day_all == sorted([
        ("bytes", 1, "10.0.0.1", 1000, 2, round(1000 / 3010, 6)), ("bytes", 2, "10.0.0.2", 1000, 1, round(1000 / 3010, 6)),
        ("packets", 1, "10.0.0.1", 1000, 2, round(10 / 17, 6)), ("packets", 2, "10.0.0.2", 1000, 1, round(3 / 17, 6)),
        ("flows", 1, "10.0.0.1", 1000, 2, 0.4), ("flows", 2, "10.0.0.2", 1000, 1, 0.2)])
    assert all(r.rank_change is None for r in out)
    inbound = [r for r in out if r.direction == "inbound"]
    assert {(r.hour, r.src_addr) for r in inbound} == {(12, "8.8.8.8"), (None, "8.8.8.8")}
    assert {r.hour for r in out} == {10, 12, None}

    # next day 10.0.0.3 climbs to rank 1, 10.0.0.1 drops to 2, 10.0.0.2 leaves the list
    t2 = t + dt.timedelta(days=1)
    day1 = tt.top_talkers(frame(spark, rows), top_n=2)
    prev = spark.createDataFrame(day1.collect(), day1.schema)
    rows2 = [{"ts": t2, "src_addr": "10.0.0.3", "bytes": 5000}, {"ts": t2, "src_addr": "10.0.0.1", "bytes": 4000},
             {"ts": t2, "src_addr": "10.0.0.9", "bytes": 10}]
    out2 = tt.top_talkers(frame(spark, rows2), top_n=2, previous=prev).where(
        "by = 'src' and metric = 'bytes' and hour is null and direction = 'all'").collect()
    assert sorted((r.rank, r.src_addr, r.rank_change) for r in out2) == [(1, "10.0.0.3", None), (2, "10.0.0.1", -1)]


@pytest.mark.integration
def test_top_talkers_local_engine_equals_spark(spark, tmp_path):
    """Both engines of top_talkers write the same rows: ranks, ties, shares, pairs,
    'all' lists, day rows and rank change, on flows with many ties, IPv6, IPv4-mapped,
    non-canonical, unparsable and empty addresses (Spark's own lists are checked against
    nfdump below). The local engine reads Parquet files partitioned by hour, as the lake's."""
    import duckdb
    import pyarrow.compute as pc

    from flowlake.jobs import top_talkers as tt
    from flowlake.jobs import top_talkers_local as ttl

    rng = random.Random(11)
    hosts = ["10.0.0.1", "10.0.0.2", "10.9.9.9", "192.0.2.7", "8.8.8.8", "1.1.1.1", "203.0.113.5", "2001:db8::1",
             "2001:DB8::2", "2001:db9::1", "::ffff:10.1.2.3", "::ffff:8.8.4.4", " 10.3.3.3 ", "not-an-address",
             "010.0.0.9", "10.0.0.1 ", "+10.0.0.5", "2001:db8:0:0:0:0:0:7", "2001:db8::1::2", ""]

    def day(d, n):
        t0 = dt.datetime(2026, 3, d, 0, 0, tzinfo=UTC)
        return [{"ts": t0 + dt.timedelta(hours=rng.choice([0, 1, 5, 23]), minutes=rng.randrange(60)),
                 "src_addr": rng.choice(hosts), "dst_addr": rng.choice(hosts),
                 "bytes": rng.choice([100, 200, 300]), "packets": rng.choice([1, 2])} for _ in range(n)]

    cols = ["hour", "direction", "by", "metric", "rank", "src_addr", "dst_addr", "bytes", "packets", "flows",
            "share", "rank_change"]

    def canon(values):  # sortable with nulls; shares to 12 digits
        return tuple((v is None, round(v, 12) if isinstance(v, float) else v) for v in values)

    def spark_rows(df):
        return sorted(canon(r) for r in df.select(*cols).collect())

    def local_rows(table):
        return sorted(canon(r[c] for c in cols) for r in table.to_pylist())

    def lake_files(d, rows):  # the lake's layout: one directory per hour, no hour column
        flows = pa.Table.from_pylist([{k: r[k] for k in ("src_addr", "dst_addr", "bytes", "packets", "proto")}
                                      | {"hour": r["hour"]} for r in flow_rows(rows)])
        files = []
        for h in sorted(set(flows["hour"].to_pylist())):
            part = tmp_path / f"d{d}" / f"hour={h:02d}"
            part.mkdir(parents=True)
            rows_h = flows.filter(pc.equal(flows["hour"], h)).drop_columns(["hour"])
            half = (rows_h.num_rows + 1) // 2
            for i, piece in enumerate((rows_h.slice(0, half), rows_h.slice(half))):  # two files, many row groups
                pq.write_table(piece, part / f"part-{i}.parquet", row_group_size=37)
                files.append(str(part / f"part-{i}.parquet"))
        return files, flows.num_rows

    con = duckdb.connect()
    results = []
    previous = None
    for d in (10, 11):
        rows = day(d, 600)
        ours = tt.top_talkers(frame(spark, rows), top_n=3, previous=previous)
        files, _ = lake_files(d, rows)
        if previous is not None:
            con.register("prev", pa.Table.from_pylist([r.asDict() for r in previous.collect()]))
        local = ttl.top_talkers(con, files, LOCAL, 3, "prev" if previous is not None else None)
        assert local_rows(local) == spark_rows(ours), f"day {d}"
        previous = spark.createDataFrame(ours.collect(), ours.schema)
        results.append(local)
    out = results[1].to_pylist()
    assert {r["direction"] for r in out} == {"all", "inbound", "outbound", "internal", "transit"}
    assert {r["by"] for r in out} == {"src", "dst", "pair"} and {r["hour"] for r in out} == {0, 1, 5, 23, None}
    assert any(r["rank_change"] not in (None, 0) for r in out) and any(r["rank_change"] is None for r in out)


@pytest.mark.integration
def test_top_talkers_local_engine_bad_input(tmp_path):
    """A corrupt or mislaid flow file stops the kernel with a message naming it."""
    from flowlake.jobs import top_talkers_local as ttl

    part = tmp_path / "hour=03"
    part.mkdir()
    bad = part / "part-0.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(RuntimeError, match=r"part-0\.parquet: not a readable Parquet file"):
        ttl.lists([str(bad)], LOCAL, 5, tmp_path / "out.parquet")
    stray = tmp_path / "part-1.parquet"
    pq.write_table(pa.table({"src_addr": ["10.0.0.1"]}), stray)
    with pytest.raises(RuntimeError, match=r"part-1\.parquet: no hour=NN partition"):
        ttl.lists([str(stray)], LOCAL, 5, tmp_path / "out.parquet")
    with pytest.raises(RuntimeError, match=r"-top-n 0: must be at least 1"):
        ttl.lists([str(stray)], LOCAL, 0, tmp_path / "out.parquet")


@pytest.mark.integration
def test_top_talkers_engine_choice(spark, tmp_path):
    from flowlake.jobs import engines

    def ctx(**env):
        return type("Ctx", (), {"cfg": private_cfg(tmp_path, **env), "spark": spark})()
    assert engines.for_reports(ctx()) == "local"  # auto, and the test session runs Spark in local mode
    assert engines.for_reports(ctx(FLOWLAKE_REPORTS_ENGINE="spark")) == "spark"
    with pytest.raises(ValueError, match=r"\[reports\] engine = 'postgres': must be one of auto, spark, local"):
        engines.for_reports(ctx(FLOWLAKE_REPORTS_ENGINE="postgres"))


# ---- protocol and app mix ------------------------------------------------------------------
@pytest.mark.integration
def test_protocol_and_app_mix(spark):
    from flowlake.jobs import app_mix, protocol_mix
    from flowlake.pipelines import port_map

    rows = [{"proto": 6, "bytes": 700}, {"proto": 17, "dst_port": 53, "bytes": 200}, {"proto": 1, "dst_port": 0, "bytes": 100},
            {"proto": 17, "dst_port": 53, "bytes": 50, "src_addr": "8.8.8.8", "dst_addr": "10.0.0.1"}]
    df = frame(spark, rows)
    pm = protocol_mix.protocol_mix(df).collect()
    day = {(r.direction, r.proto_name): r for r in pm if r.hour is None}
    assert day[("all", "UDP")].bytes == 250 and day[("all", "UDP")].flows == 2
    assert day[("inbound", "UDP")].bytes_share == 1.0
    assert math.isclose(day[("all", "TCP")].bytes_share, 700 / 1050)
    for d in ("all", "outbound"):
        assert math.isclose(sum(r.bytes_share for r in pm if r.hour is None and r.direction == d), 1.0)
    am = {(r.hour, r.direction, r.app): r for r in app_mix.app_mix(df, port_map.load()).collect()}
    assert am[(None, "all", "dns")].bytes == 250 and am[(10, "outbound", "https")].flows == 1
    assert am[(None, "all", "icmp")].packets == 1


# ---- traffic time series -----------------------------------------------------------------------
@pytest.mark.integration
def test_traffic_ts_spreads_and_summarises(spark):
    from flowlake.jobs import traffic_ts

    day = dt.date(2026, 3, 10)
    t = dt.datetime(2026, 3, 10, 10, 2, 30, tzinfo=UTC)
    rows = [{"ts": t, "te": t + dt.timedelta(minutes=10), "bytes": 6000, "packets": 60},   # 10:02:30-10:12:30
            {"ts": t, "te": t, "bytes": 300, "packets": 3, "proto": 17, "input_if": 7},        # instant
            {"ts": dt.datetime(2026, 3, 10, 23, 58, tzinfo=UTC), "te": dt.datetime(2026, 3, 11, 0, 2, tzinfo=UTC),
             "bytes": 4000, "packets": 40}]                                                   # crosses midnight
    out = traffic_ts.traffic_ts(frame(spark, rows), day).collect()
    ts = {(r.bucket.replace(tzinfo=None) if r.bucket else None, r.series, r.direction, r.input_if, r.proto): r
          for r in out if r.kind == "ts"}
    b = lambda h, m: dt.datetime(2026, 3, 10, h, m)  # noqa: E731
    total = {k[0]: r.bytes for k, r in ts.items() if k[1] == "total" and k[2] == "all"}
    assert total == pytest.approx({b(10, 0): 6000 * 2.5 / 10 + 300, b(10, 5): 3000, b(10, 10): 1500, b(23, 55): 2000})
    assert ts[(b(10, 5), "total", "all", None, None)].bps == pytest.approx(3000 * 8 / 300)
    assert ts[(b(10, 0), "interface", "outbound", 7, None)].bytes == pytest.approx(300)
    assert ts[(b(10, 0), "proto", "all", None, 6)].pps == pytest.approx(15 / 300)
    assert all(r.hour == r.bucket.hour for r in out if r.kind == "ts")
    daily = {(r.series, r.direction, r.input_if, r.proto): r for r in out if r.kind == "daily"}
    d = daily[("total", "all", None, None)]
    rates = np.zeros(288)
    for k, v in total.items():
        rates[(k.hour * 60 + k.minute) // 5] = v * 8 / 300
    assert d.bytes == pytest.approx(6000 + 300 + 2000)
    assert d.bps == pytest.approx(rates.mean()) and d.peak_bps == pytest.approx(rates.max())
    assert d.p95_bps == pytest.approx(np.percentile(rates, 95, method="inverted_cdf"))
    # enough busy buckets for p95 to be non-zero: compare with numpy on random rates
    rng = np.random.default_rng(3)
    busy = [{"ts": dt.datetime(2026, 3, 10, tzinfo=UTC) + dt.timedelta(minutes=5 * int(k)), "bytes": int(v), "packets": 1}
            for k, v in zip(rng.choice(288, 40, replace=False), rng.integers(1, 10**6, 40))]
    d2 = [r for r in traffic_ts.traffic_ts(frame(spark, busy), day).collect()
          if r.kind == "daily" and r.series == "total" and r.direction == "all"][0]
    rates2 = np.zeros(288)
    for f in busy:
        rates2[(f["ts"].hour * 60 + f["ts"].minute) // 5] += f["bytes"] * 8 / 300
    assert d2.p95_bps == pytest.approx(np.percentile(rates2, 95, method="inverted_cdf")) and d2.p95_bps > 0


# ---- flow size distribution -----------------------------------------------------------------
@pytest.mark.integration
def test_flow_size_dist_exact_vs_numpy(spark):
    """Both engines (Spark; DuckDB) against numpy, for every hour/day x direction x class."""
    import duckdb

    from flowlake.jobs import flow_size_dist as fsd
    from flowlake.jobs import flow_size_dist_duckdb as fsd_duck

    rng = np.random.default_rng(11)
    n = 4000
    packets = np.floor(rng.pareto(1.3, n) * 3 + 1).astype(np.int64)
    sizes = (packets * rng.integers(40, 1500, n)).astype(np.int64)
    sizes[:7] = 0  # zero-byte flows count in n but have no CCDF bin
    protos = rng.choice([6, 6, 6, 17, 17, 1, 47], n)
    srcs = rng.choice(["10.0.0.1", "8.8.8.8"], n)
    hours = rng.choice([3, 17], n, p=[0.3, 0.7])
    rows = [{"proto": int(p), "bytes": int(b), "packets": int(k), "src_addr": str(s),
             "dst_addr": "9.9.9.9" if s == "10.0.0.1" else "10.0.0.2",
             "ts": dt.datetime(2026, 3, 10, int(h), 5, tzinfo=UTC)}
            for p, b, k, s, h in zip(protos, sizes, packets, srcs, hours)]
    spark_rows = {(r.hour, r.direction, r.flow_class): r.asDict() for r in fsd.flow_size_dist(frame(spark, rows)).collect()}
    # the local engine (DuckDB) on the same flows (what `[reports] engine = auto` runs in local mode)
    con = duckdb.connect()
    con.register("flows", pa.Table.from_pylist([{k: r[k] for k in ("hour", "src_addr", "dst_addr", "proto", "bytes", "packets")}
                                                for r in flow_rows(rows)]))
    duck_rows = {(r["hour"], r["direction"], r["flow_class"]): r
                 for r in fsd_duck.flow_size_dist(con, "flows", LOCAL).to_pylist()}
    classes = {"tcp": protos == 6, "udp": protos == 17, "icmp": protos == 1, "other": protos == 47, "all": protos > 0}
    dirs = {"all": srcs != "", "outbound": srcs == "10.0.0.1", "inbound": srcs == "8.8.8.8"}
    times = {None: hours >= 0, 3: hours == 3, 17: hours == 17}
    for engine, out in (("spark", spark_rows), ("duckdb", duck_rows)):
        assert set(out) == {(h, d, c) for h in times for d in dirs for c in classes}, engine
        for (h, d, c), r in out.items():
            where = (engine, h, d, c)
            mask = classes[c] & dirs[d] & times[h]
            b, k = sizes[mask], packets[mask]
            assert r["flows"] == mask.sum() and r["bytes"] == b.sum() and r["packets"] == k.sum(), where
            assert r["bytes_mean"] == pytest.approx(b.mean()) and r["packets_mean"] == pytest.approx(k.mean()), where
            for name, permille in fsd.PERCENTILES:
                assert r[f"bytes_{name}"] == np.quantile(b, permille / 1000, method="inverted_cdf"), (*where, name)
                assert r[f"packets_{name}"] == np.quantile(k, permille / 1000, method="inverted_cdf"), (*where, name)
            top = np.sort(b)[::-1][: math.ceil(len(b) * 0.01)]
            assert r["top1pct_bytes_share"] == pytest.approx(top.sum() / b.sum()), where
            assert len(r["ccdf_bytes_x"]) == len(r["ccdf_bytes_y"]) > 3, where
            for x, y in zip(r["ccdf_bytes_x"], r["ccdf_bytes_y"]):
                assert y == pytest.approx((b >= x).mean()), where
            for x, y in zip(r["ccdf_packets_x"], r["ccdf_packets_y"]):
                assert y == pytest.approx((k >= x).mean()), where
            assert list(r["ccdf_bytes_x"]) == sorted(r["ccdf_bytes_x"]) and r["ccdf_packets_y"][0] == 1.0, where
            # and the two engines agree value for value (doubles to rounding)
            other = spark_rows[(h, d, c)]
            for col, v in r.items():
                assert (v == pytest.approx(other[col], rel=1e-12)) if isinstance(v, (float, list)) else v == other[col], \
                    (*where, col)


# ---- the runner ------------------------------------------------------------------------------
def test_every_job_imports_without_spark():
    """`flowlake jobs list` imports every job module before any Spark session exists (a
    module-level F.col() fails there): run it in a fresh interpreter."""
    import sys

    res = subprocess.run([sys.executable, "-m", "flowlake.cli", "jobs", "list"], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "250"}, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "cannot import" not in res.stdout, res.stdout
    for name in MY_JOBS + ["largest_flows", "traffic_totals"]:
        assert name in res.stdout


def test_cli_validates_date_and_job():
    from flowlake.jobs.runner import jobs

    res = CliRunner().invoke(jobs, ["run", "--date", "2026-02-30"])
    assert res.exit_code == 2 and "'2026-02-30' is not a date" in res.output and "YYYY-MM-DD" in res.output
    res = CliRunner().invoke(jobs, ["run", "--date", "2026-02-03", "--job", "nope"])
    assert res.exit_code == 2 and "unknown job(s) nope" in res.output and "top_talkers" in res.output


def test_runner_orders_by_depends():
    from flowlake.jobs.runner import Job, order

    jobs = {n: Job(n, n, depends=d) for n, d in {"c": ("b",), "b": ("a",), "a": (), "z": ()}.items()}
    # a dependent runs right after what it depends on (its hand-off is freed early), else alphabetical
    assert [j.name for j in order(jobs, ["z", "c", "b", "a"])] == ["a", "b", "c", "z"]
    jobs.update({n: Job(n, n, depends=d) for n, d in {"y": ("a", "z"), "d": ()}.items()})
    assert [j.name for j in order(jobs, ["y", "z", "d", "c", "b", "a"])] == ["a", "b", "c", "d", "z", "y"]
    jobs["a"] = Job("a", "a", depends=("c",))
    with pytest.raises(Exception, match="cycle"):
        order(jobs, ["a", "b", "c"])


@pytest.mark.integration
def test_runner_frees_a_hand_off_after_its_dependents_and_every_leaked_cache(spark, tmp_path):
    """Caches must not pile up over the set (later jobs ran 1.5-1.8x slower in it than alone):
    a cached frame handed on through ctx.shared lives until its dependents ran, a cache a
    job left behind until the next job that holds no hand-off; the run's scratch stays."""
    from flowlake.jobs.runner import Job, order, run_jobs

    seen = {}

    def cached(df):  # what Spark's cache manager holds for df's plan (is_cached is only Python's flag)
        level = df.storageLevel
        return level.useMemory or level.useDisk

    def hand_off(ctx):
        ctx.shared["frames"] = spark.range(10).cache()
        ctx.shared["scratch"] = ["the run's own"]
        ctx.shared["plan"] = spark.range(3)  # shared plan, not cached: never blocks the clearing

    def leak(ctx):
        seen["leak"] = spark.range(20).cache()
        seen["leak"].count()

    def use(ctx):
        seen["at use"] = cached(ctx.shared["frames"]), cached(seen["leak"])
        seen["frames"] = ctx.shared["frames"]

    def after(ctx):
        seen["after"] = cached(seen["frames"]), cached(seen["leak"]), "frames" in ctx.shared, ctx.shared["scratch"]

    jobs = {"a": Job("a", "a", run=hand_off), "a_leak": Job("a_leak", "a_leak", run=leak),
            "b": Job("b", "b", depends=("a", "a_leak"), run=use), "c": Job("c", "c", run=after)}
    ran = order(jobs, list(jobs))
    assert [j.name for j in ran] == ["a", "a_leak", "b", "c"]
    out = run_jobs(spark, private_cfg(tmp_path), dt.date(2026, 3, 1), ran)
    assert [o.status for o in out] == ["ok"] * 4, out
    assert seen["at use"] == (True, True)  # all held while `b` (which depends on `a`) was to come
    assert seen["after"] == (False, False, False, ["the run's own"])


MY_JOBS = ["top_talkers", "protocol_mix", "app_mix", "traffic_ts", "flow_size_dist"]


@pytest.mark.integration
def test_empty_date_writes_empty_tables_and_failures_are_isolated(spark, tmp_path):
    from flowlake.jobs import runner
    from flowlake.schemas import registry

    cfg = private_cfg(tmp_path)
    found = runner.discover()
    selected = runner.order(found, MY_JOBS)
    outcomes = runner.run_jobs(spark, cfg, dt.date(2026, 3, 1), selected)
    assert [(o.job, o.status) for o in outcomes] == [(j.name, "ok") for j in selected]
    for name in MY_JOBS:
        part = cfg.lake / "reports" / name / "date=2026-03-01"
        table = pq.read_table(part)
        assert table.num_rows == 0 and table.column_names == [c for c in registry()[name].names if c != "date"]

    bad_map = tmp_path / "ports.csv"
    bad_map.write_text("port,proto,service\n80,tcp,http\n80,tpc,typo\n")
    cfg2 = private_cfg(tmp_path, FLOWLAKE_REPORTS_PORT_MAP=str(bad_map))
    outcomes = runner.run_jobs(spark, cfg2, dt.date(2026, 3, 1), runner.order(found, ["app_mix", "protocol_mix"]))
    status = {o.job: o for o in outcomes}
    assert status["protocol_mix"].status == "ok" and status["app_mix"].status == "failed"
    assert f"{bad_map}, line 3" in status["app_mix"].error


# ---- the nfdump cross-check over real nfcapd files ------------------------------------------------
def write_pcap(path: Path, packets) -> None:
    """Ethernet/IPv4|IPv6 + TCP|UDP|ICMP frames; softflowd reads them like a capture."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for ts, src, dst, proto, sport, dport, size in packets:
            s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
            if proto == 6:
                l4 = struct.pack("!HHIIBBHHH", sport, dport, 0, 0, 0x50, 0x18, 8192, 0, 0)
            elif proto == 17:
                l4 = struct.pack("!HHHH", sport, dport, 8, 0)
            else:
                l4 = struct.pack("!BBHI", 8, 0, 0, 0)
            if s.version == 4:
                payload = b"\0" * max(0, size - 20 - len(l4))
                ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4) + len(payload), 0, 0, 64, proto, 0, s.packed, d.packed)
                eth = b"\0" * 12 + b"\x08\x00"
            else:
                payload = b"\0" * max(0, size - 40 - len(l4))
                ip = struct.pack("!IHBB16s16s", 0x60000000, len(l4) + len(payload), 58 if proto == 1 else proto, 64, s.packed, d.packed)
                eth = b"\0" * 12 + b"\x86\xdd"
            frame_ = eth + ip + l4 + payload
            sec = int(ts)
            f.write(struct.pack("<IIII", sec, int(round((ts - sec) * 1e6)), len(frame_), len(frame_)) + frame_)


SACRIFICE = "192.0.2.254"  # softflowd -a stamps the capture's first flow with time 0: excluded everywhere


def day_traffic(day: dt.date, seed: int):
    """A skewed mix: a few heavy local and remote hosts, many light ones, IPv4 and IPv6,
    TCP/UDP/ICMP, inbound/outbound/internal/transit, spread over three hours."""
    rng = random.Random(seed)
    t0 = dt.datetime(day.year, day.month, day.day, 9, 0, tzinfo=UTC).timestamp()
    local = [f"10.1.0.{i}" for i in range(1, 31)] + [f"2001:db8::{i:x}" for i in range(1, 6)] + ["192.0.2.10"]
    remote = [f"203.0.113.{i}" for i in range(1, 21)] + [f"2001:db9::{i:x}" for i in range(1, 4)] + ["198.18.0.1"]
    weights = [1 / (i + 1) ** 1.1 for i in range(len(local) + len(remote))]
    random.Random(99).shuffle(weights)  # the same popular hosts every day: ranks move a little
    hosts = local + remote
    packets = [(t0 - 60, SACRIFICE, "203.0.113.1", 17, 9, 9, 100)]
    for n in range(900):
        a = rng.choices(hosts, weights)[0]
        pool = [h for h in hosts if ipaddress.ip_address(h).version == ipaddress.ip_address(a).version and h != a]
        b = rng.choice(pool)
        src, dst = (a, b) if rng.random() < 0.6 else (b, a)
        proto = rng.choices([6, 17, 1], [0.7, 0.25, 0.05])[0]
        sport, dport = (0, 0) if proto == 1 else (20000 + n, rng.choice([443, 53, 5021, 2811, 5201, 161, 8080]))
        start = t0 + rng.uniform(0, 3 * 3600 - 60)
        npk = 1 + int(rng.paretovariate(1.2))
        npk = min(npk, 60)
        size = rng.randint(60, 1400)
        for k in range(npk):
            packets.append((start + k * 0.01, src, dst, proto, sport, dport, size))
    packets.sort()
    return packets


def capture(tmp: Path, packets) -> Path:
    """pcap -> softflowd (NetFlow v9) -> nfcapd on a free port -> one nfcapd file."""
    pcap = tmp / "day.pcap"
    write_pcap(pcap, packets)

    def feed(port: int) -> None:
        run(["softflowd", "-a", "-d", "-r", str(pcap), "-n", f"127.0.0.1:{port}", "-v", "9", "-6", "-c", "none",
             "-p", str(tmp / "softflowd.pid")], timeout=120)
        time.sleep(1.0)

    nf, out = nfcapd_capture.capture(tmp / "spool", feed)
    assert "Flows: 0," not in out, out
    return nf


def lake_from_nfdump(nfcapd_file: Path, lake: Path) -> int:
    """The same flows into lake/flows/date=/hour= (read with `nfdump -o pipe`)."""
    from flowlake.schemas import FLOW

    lines = run(["nfdump", "-r", str(nfcapd_file), "-o", "pipe", "-q", "-N"]).stdout.splitlines()
    cols = {n: [] for n in FLOW.names}
    for seq, line in enumerate(lines):
        f = line.split("|")
        af, first, last, proto = int(f[0]), int(f[1]), int(f[2]), int(f[3])

        def addr(parts):
            if af == 2:
                return str(ipaddress.IPv4Address(int(parts[3])))
            return str(ipaddress.IPv6Address(sum(int(p) << (96 - 32 * i) for i, p in enumerate(parts))))

        row = {"time_start": first, "time_end": last, "exporter": "127.0.0.1", "input_if": int(f[16]),
               "output_if": int(f[17]), "src_addr": addr(f[4:8]), "dst_addr": addr(f[9:13]), "src_port": int(f[8]),
               "dst_port": int(f[13]), "proto": proto, "tcp_flags": int(f[18]), "tos": int(f[19]), "packets": int(f[20]),
               "bytes": int(f[21]), "sampling_rate": 1, "src_as": int(f[14]), "dst_as": int(f[15]),
               "source_file": nfcapd_file.name, "file_seq": seq}
        for k, v in row.items():
            cols[k].append(v)
    arrow = {"int": pa.int32(), "long": pa.int64(), "string": pa.string(), "timestamp_ms": pa.timestamp("ms", tz="UTC"),
             "array_int": pa.list_(pa.int32()), "array_long": pa.list_(pa.int64()),
             "array_string": pa.list_(pa.string())}
    # nfdump -o pipe prints no VLANs nor revision 3's fields: those columns stay null (not
    # read), as in a lake from before them
    table = pa.table({f.name: pa.array(cols[f.name] or [None] * len(lines), arrow[f.type]) for f in FLOW.fields})
    starts = table.column("time_start").to_pylist()
    keys = sorted({(t.date().isoformat(), t.hour) for t in starts})
    for date, hour in keys:
        mask = pa.array([(t.date().isoformat(), t.hour) == (date, hour) for t in starts])
        part = lake / "flows" / f"date={date}" / f"hour={hour:02d}"
        part.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.filter(mask), part / "part-0.parquet")
    return len(lines)


def nfdump_stat(nfcapd_file: Path, stat: str, filt: str = "") -> list[tuple[str, int, int, int]]:
    """Every entry of `nfdump -s stat` as (key, flows, packets, bytes), nfdump's order."""
    f = f"not host {SACRIFICE}" + (f" and ({filt})" if filt else "")
    out = run(["nfdump", "-r", str(nfcapd_file), "-s", stat, "-n", "0", "-N", "-q", "-o", "csv", f]).stdout
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if not lines:
        return []
    head = lines[0].split(",")
    idx = {k: head.index(k) for k in ("val", "fl")}
    pk = head.index("ipkt") if "ipkt" in head else head.index("pkt")
    by = head.index("ibyt") if "ibyt" in head else head.index("byt")
    rows = []
    for ln in lines[1:]:
        c = ln.split(",")
        rows.append((c[idx["val"]].strip(), int(c[idx["fl"]]), int(c[pk]), int(c[by])))
    return rows


def nfdump_pairs(nfcapd_file: Path) -> list[tuple[str, int, int, int]]:
    out = run(["nfdump", "-r", str(nfcapd_file), "-A", "srcip,dstip", "-N", "-q", "-o", "fmt:%sa|%da|%fl|%pkt|%byt",
               f"not host {SACRIFICE}"]).stdout
    rows = []
    for ln in out.splitlines():
        p = [x.strip() for x in ln.split("|")]
        if len(p) == 5:
            rows.append((f"{p[0]}>{p[1]}", int(p[2]), int(p[3]), int(p[4])))
    return rows


def assert_same_top(ours: list[tuple[str, int]], reference: list[tuple[str, int]], n: int, what: str):
    """Same values in the same order; tied keys compared as sets (nfdump's tie order is
    its hash order), the last tie group may be cut anywhere by both."""
    ref = sorted(reference, key=lambda kv: -kv[1])
    assert [v for _, v in ours] == [v for _, v in ref[:n]], what
    for value in {v for _, v in ours}:
        mine = {k for k, v in ours if v == value}
        theirs = {k for k, v in ref if v == value}
        if len(theirs) == len(mine):
            assert mine == theirs, (what, value)
        else:
            assert mine < theirs and value == ours[-1][1], (what, value)
    # nfdump's order, where it is not a tie, is ours
    order_nf = [k for k, _ in reference[:n]]
    uniq = {v for _, v in ours if sum(1 for _, w in ref if w == v) == 1}
    assert [k for k, v in ours if v in uniq] == [k for k in order_nf if dict(reference)[k] in uniq], what


@pytest.mark.integration
def test_reports_equal_nfdump_on_real_nfcapd_files(spark, tmp_path, nfdump_bin):
    from flowlake.jobs import runner

    cfg = private_cfg(tmp_path / "home", FLOWLAKE_REPORTS_TOP_N="10")
    days = [dt.date(2026, 3, 10), dt.date(2026, 3, 11)]
    files = {}
    for i, day in enumerate(days):
        work = tmp_path / f"cap{i}"
        work.mkdir()
        files[day] = capture(work, day_traffic(day, seed=100 + i))
        assert lake_from_nfdump(files[day], cfg.lake) > 800

    found = runner.discover()
    for day in days:  # with every other job that reads the shared flows
        outcomes = runner.run_jobs(spark, cfg, day, runner.order(found, MY_JOBS + ["largest_flows", "traffic_totals"]))
        assert all(o.status == "ok" for o in outcomes), [(o.job, o.error) for o in outcomes]

    tt = {day: pq.read_table(cfg.lake / "reports" / "top_talkers" / f"date={day}").to_pylist() for day in days}
    # Spark local mode: [reports] engine auto chose the Go kernel for top_talkers; Spark's own
    # engine must write the very same table (checked against nfdump below through it)
    assert runner.run_jobs(spark, private_cfg(tmp_path / "home", FLOWLAKE_REPORTS_TOP_N="10",
                                              FLOWLAKE_REPORTS_ENGINE="spark"),
                           days[1], runner.order(found, ["top_talkers"]))[0].status == "ok"
    by_spark = pq.read_table(cfg.lake / "reports" / "top_talkers" / f"date={days[1]}").to_pylist()

    def canon(rows):
        return sorted(tuple((v is None, round(v, 12) if isinstance(v, float) else v) for v in r.values()) for r in rows)
    assert canon(by_spark) == canon(tt[days[1]]) and len(by_spark) > 100
    src_local = " or ".join(f"src net {p}" for p in LOCAL)
    dst_local = " or ".join(f"dst net {p}" for p in LOCAL)
    directions = {"all": "", "outbound": f"({src_local}) and not ({dst_local})",
                  "inbound": f"not ({src_local}) and ({dst_local})", "internal": f"({src_local}) and ({dst_local})",
                  "transit": f"not ({src_local}) and not ({dst_local})"}
    metric_col = {"flows": 1, "packets": 2, "bytes": 3}
    day = days[1]
    rows = tt[day]
    for direction, filt in directions.items():
        for by, stat in (("src", "srcip"), ("dst", "dstip")):
            for metric in ("bytes", "packets", "flows"):
                ref = nfdump_stat(files[day], f"{stat}/{metric}", filt)
                ours = sorted((r for r in rows if r["hour"] is None and r["direction"] == direction and r["by"] == by
                               and r["metric"] == metric), key=lambda r: r["rank"])
                key = "src_addr" if by == "src" else "dst_addr"
                assert_same_top([(r[key], r[metric]) for r in ours], [(k, v[metric_col[metric] - 1])
                                for k, *v in ref], 10, f"{direction} {stat}/{metric}")
                totals = {k: v for k, *v in ref}
                for r in ours:  # all three counters of every listed host agree with nfdump
                    assert totals[r[key]] == [r["flows"], r["packets"], r["bytes"]]
                    assert r["share"] == pytest.approx(r[metric] / sum(v[metric_col[metric] - 1] for _, *v in ref))
    pairs = nfdump_pairs(files[day])
    ours = sorted((r for r in rows if r["hour"] is None and r["direction"] == "all" and r["by"] == "pair"
                   and r["metric"] == "bytes"), key=lambda r: r["rank"])
    assert_same_top([(f"{r['src_addr']}>{r['dst_addr']}", r["bytes"]) for r in ours],
                    [(k, b) for k, _, _, b in sorted(pairs, key=lambda p: -p[3])], 10, "pairs by bytes")

    # protocol mix and -s proto/flows
    pm = pq.read_table(cfg.lake / "reports" / "protocol_mix" / f"date={day}").to_pylist()
    ref = nfdump_stat(files[day], "proto/flows")
    mine = sorted(((r["proto"], r["flows"], r["packets"], r["bytes"]) for r in pm if r["hour"] is None and r["direction"] == "all"),
                  key=lambda t: -t[1])
    assert mine == [(int(k), fl, pk, by) for k, fl, pk, by in ref]

    # day-over-day rank change: against nfdump's ranks on the two days (where not tied)
    def nf_ranks(f):
        ref = nfdump_stat(f, "srcip/bytes")
        values = [b for _, _, _, b in ref]
        unique = {k: i + 1 for i, (k, _, _, b) in enumerate(ref) if values.count(b) == 1}
        return unique, dict((k, b) for k, _, _, b in ref), sorted(values, reverse=True)[9]
    (r0, v0, tenth0), (r1, _, _) = nf_ranks(files[days[0]]), nf_ranks(files[days[1]])
    checked = new = 0
    for r in rows:
        if r["hour"] is None and r["direction"] == "all" and r["by"] == "src" and r["metric"] == "bytes":
            k = r["src_addr"]
            if k in r0 and k in r1 and r0[k] <= 10:
                assert r["rank_change"] == r0[k] - r1[k], k
                checked += 1
            elif v0.get(k, -1) < tenth0:  # not in yesterday's top 10
                assert r["rank_change"] is None, k
                new += 1
    assert checked >= 3 and checked + new >= 8
    assert any(r["rank_change"] not in (None, 0) for r in rows)

    # every table has 'all' rows and hour-null rows; hourly rows add up to the day
    for name in MY_JOBS:
        t = pq.read_table(cfg.lake / "reports" / name / f"date={day}").to_pylist()
        assert any(r["direction"] == "all" for r in t) and len({r["direction"] for r in t}) >= 4, name
    hourly = sum(r["bytes"] for r in pm if r["hour"] is not None and r["direction"] == "all")
    assert hourly == sum(b for _, _, _, b in ref) and len({r["hour"] for r in pm}) == 4
    ts = pq.read_table(cfg.lake / "reports" / "traffic_ts" / f"date={day}").to_pylist()
    daily = [r for r in ts if r["kind"] == "daily" and r["series"] == "total" and r["direction"] == "all"][0]
    assert daily["bytes"] == pytest.approx(sum(b for _, _, _, b in ref))
