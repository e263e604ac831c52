"""Enrichment on the real ingest path: FlowBatch messages in a real Kafka topic, the real
Spark ingest (`ingest.run --once`), enriched columns in the lake equal to what this test
put in the MMDB files (built here), the networks file, the SNMP cache file and the static
names and rules of flowlake.toml. Then: a replaced database and SNMP file picked up
without restart (earlier rows keep the names of their day), a corrupt database refused
with the previous kept and the error in `flowlake status`, and an older lake hour without
the columns still read by Spark, DuckDB, compaction and the rollups."""
from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer

from flowlake.base import delta

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import mmdb_files  # noqa: E402
from test_enrich import snmp_exporter, write_snmp  # noqa: E402

pytestmark = pytest.mark.integration

ASN_NETS = {"10.0.0.0/8": (64500, "Campus", "", ""), "10.20.0.0/16": (64510, "Lab", "", ""),
            "198.51.100.0/24": (13335, "Cloud", "", ""), "2001:db8::/32": (64520, "Six", "", "")}
GEO_NETS = {"10.0.0.0/8": (0, "", "US", "Menlo Park"), "198.51.100.0/24": (0, "", "DE", "Frankfurt"),
            "2001:db8::/32": (0, "", "CH", "Geneva")}
NETWORKS = [("10.0.0.0/8", "campus", "internal", "slac", "us-west", "doe"),
            ("10.20.0.0/16", "physics", "lab", "slac-b1", "us-west", "physics"),
            ("2001:db8:1::/48", "six-lab", "lab", "b2", "us-west", "cs")]
HOUR = dt.datetime(2026, 11, 20, 10, tzinfo=dt.timezone.utc)
TOML = """
[exporters."127.0.0.2"]
sampling = 10
name = "border-1"
[exporters."127.0.0.2".interfaces.3]
description = "IX: AMS-IX lan"
[[enrich.interface_rules]]
description = '(?i)^(?P<connectivity>transit|ix):? (?P<provider>\\S+)'
boundary = "external"
[[enrich.interface_rules]]
boundary = "internal"
connectivity = "core"
[enrich]
asn_database = "{asn}"
geo_database = "{geo}"
networks = "{nets}"
"""


@pytest.fixture(scope="module")
def ecfg(kafka, tmp_path_factory):
    from flowlake.base import config
    from flowlake.collectors import kafka as kafka_service

    d = tmp_path_factory.mktemp("enrich-files")
    mmdb_files.write(d / "asn.mmdb", "GeoLite2-ASN", ASN_NETS)
    mmdb_files.write(d / "geo.mmdb", "GeoLite2-City", GEO_NETS)
    (d / "nets.csv").write_text("prefix,name,role,site,region,tenant\n" +
                                "".join(",".join(n) + "\n" for n in NETWORKS))
    (d / "flowlake.toml").write_text(TOML.format(asn=d / "asn.mmdb", geo=d / "geo.mmdb", nets=d / "nets.csv"))
    env = {**os.environ, "FLOWLAKE_HOME": str(tmp_path_factory.mktemp("enrich-home")),
           "FLOWLAKE_KAFKA_FLOWS_TOPIC": "flows.test-enrich", "FLOWLAKE_KAFKA_ACTIVE_TOPIC": "active.test-enrich",
           "FLOWLAKE_KAFKA_HEALTH_TOPIC": "health.test-enrich", "FLOWLAKE_KAFKA_LEDGER_TOPIC": "ledger.test-enrich"}
    c = config.load(d / "flowlake.toml", env=env)
    c.files, c.env = d, {**env, "FLOWLAKE_CONFIG": str(d / "flowlake.toml")}
    kafka_service.ensure_topics(c)
    return c


def produce(cfg, source: str, rows: list[dict]) -> None:
    from flowlake.schemas import FLOW, messages

    base = {"time_start": HOUR, "time_end": HOUR + dt.timedelta(seconds=1), "src_port": 1, "dst_port": 443,
            "proto": 6, "tcp_flags": 0, "tos": 0, "packets": 10, "bytes": 1000, "sampling_rate": 10,
            "src_as": 0, "dst_as": 0, "source_file": source}
    full = [{**base, **r, "file_seq": i} for i, r in enumerate(rows)]
    p = Producer({"bootstrap.servers": cfg.kafka_bootstrap})
    p.produce(cfg.kafka.flows_topic, messages.encode_flow_batch(FLOW, full), key=source)
    assert p.flush(30) == 0


def lake(cfg, source: str) -> list[dict]:
    con = duckdb.connect()
    try:
        delta.duckdb_load_delta(con)  # lake/flows is a Delta table: its current version
        return con.execute(f"select * from delta_scan('{cfg.lake}/flows') where source_file = ? order by file_seq",
                           [source]).fetch_arrow_table().to_pylist()
    finally:
        con.close()


def reference(prefixes: dict, addr: str, pick) -> object:
    """Longest-prefix value from the test's own tables (the independent reference)."""
    a = ipaddress.ip_address(addr)
    best = max((ipaddress.ip_network(p) for p in prefixes if a in ipaddress.ip_network(p)),
               key=lambda n: n.prefixlen, default=None)
    return pick(prefixes[str(best)]) if best else pick(None)


def net_of(addr: str) -> tuple:
    nets = {n[0]: n[1:] for n in NETWORKS}
    return reference(nets, addr, lambda v: v or ("",) * 5)


FLOWS = [  # exporter, in, out, src, dst, router src_as
    ("127.0.0.2", 3, 7, "198.51.100.9", "10.20.1.1", 0),
    ("127.0.0.2", 7, 3, "10.1.2.3", "198.51.100.200", 0),
    ("127.0.0.2", 3, 9, "2001:db8:1::5", "203.0.113.1", 4200000001),   # out 9: unknown; dst: in no database
    ("2001:db8::99", 1, 0, "2001:db8:2::1", "10.20.0.1", 0),           # exporter only SNMP knows
]


def rows_of(flows) -> list[dict]:
    return [{"exporter": e, "input_if": i, "output_if": o, "src_addr": s, "dst_addr": d, "src_as": a}
            for e, i, o, s, d, a in flows]


def check_rows(got: list[dict], asn_nets: dict, names: dict) -> None:
    assert len(got) == len(FLOWS)
    for g, (exp, i, o, src, dst, router_as) in zip(got, FLOWS):
        assert g["src_as"] == (router_as or reference(asn_nets, src, lambda v: v[0] if v else 0)), g
        assert g["dst_as"] == reference(asn_nets, dst, lambda v: v[0] if v else 0), g
        for side, addr in (("src", src), ("dst", dst)):
            assert g[f"{side}_country"] == reference(GEO_NETS, addr, lambda v: v[2] if v else ""), (side, g)
            assert g[f"{side}_city"] == reference(GEO_NETS, addr, lambda v: v[3] if v else ""), (side, g)
            assert tuple(g[f"{side}_net_{k}"] for k in ("name", "role", "site", "region", "tenant")) == net_of(addr)
        ename, ifs = names.get(exp, ("", {}))
        assert g["exporter_name"] == ename
        for side, idx in (("in", i), ("out", o)):
            want = ifs.get(idx, ("", "", 0, "", "", ""))
            assert (g[f"{side}_if_name"], g[f"{side}_if_description"], g[f"{side}_if_speed"], g[f"{side}_if_boundary"],
                    g[f"{side}_if_connectivity"], g[f"{side}_if_provider"]) == want, (side, idx, g)


def status_json(cfg) -> dict:
    res = subprocess.run([sys.executable, "-m", "flowlake.cli", "status", "--json"], env=cfg.env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)["enrich"]


def test_ingest_enriches_every_flow_reloads_and_refuses_broken_files(ecfg, spark):
    from flowlake.pipelines import ingest

    cfg = ecfg
    write_snmp(cfg.home_dir, {
        "127.0.0.2": snmp_exporter("b1.snmp", {3: ("et-3", "old alias", 100000), 7: ("et-7", "Transit: Cogent 12", 10000)}),
        "2001:db8::99": snmp_exporter("core-6", {1: ("xe-1", "backbone", 40000)})})
    produce(cfg, "one", rows_of(FLOWS))
    ingest.run(cfg, once=True)
    names = {"127.0.0.2": ("border-1", {3: ("et-3", "IX: AMS-IX lan", 100000, "external", "ix", "ams-ix"),
                                        7: ("et-7", "Transit: Cogent 12", 10000, "external", "transit", "cogent")}),
             "2001:db8::99": ("core-6", {1: ("xe-1", "backbone", 40000, "internal", "core", "")})}
    check_rows(lake(cfg, "one"), ASN_NETS, names)
    assert (cfg.path("state", "snmp", "refresh") / "127.0.0.2").exists(), "unknown ifIndex 9: a refresh asked for"

    st = status_json(cfg)
    assert st["sources"]["asn"]["in_use"]["database_type"] == "GeoLite2-ASN"
    assert st["sources"]["geo"]["in_use"]["has_city"] and st["sources"]["networks"]["in_use"]["networks"] == 3
    assert st["lake"]["flows"] == 4 and st["lake"]["unknown_dst_as"] == 0.25 and st["lake"]["unknown_out_if_name"] == pytest.approx(1 / 3, abs=1e-3)
    assert st["rules"] == 2 and st["snmp"]["exporters"] == 2 and not st["warnings"]

    # hot reload: a new ASN database and a new SNMP poll, no restart
    new_asn = {**ASN_NETS, "10.20.0.0/16": (65020, "Lab-renumbered", "", "")}
    mmdb_files.write(cfg.files / "asn.mmdb.new", "GeoLite2-ASN", new_asn)
    os.replace(cfg.files / "asn.mmdb.new", cfg.files / "asn.mmdb")
    write_snmp(cfg.home_dir, {"127.0.0.2": snmp_exporter("b1.snmp", {3: ("et-3", "x", 100000), 7: ("et-7", "x", 10000),
                                                                      9: ("et-9", "Transit: Lumen 7", 1000)}),
                              "2001:db8::99": snmp_exporter("core-6", {1: ("xe-1", "backbone", 40000)})})
    produce(cfg, "two", rows_of(FLOWS))
    ingest.run(cfg, once=True)
    names2 = {**names, "127.0.0.2": ("border-1", {**names["127.0.0.2"][1],
                                                  7: ("et-7", "x", 10000, "internal", "core", ""),
                                                  9: ("et-9", "Transit: Lumen 7", 1000, "external", "transit", "lumen")})}
    check_rows(lake(cfg, "two"), new_asn, names2)
    check_rows(lake(cfg, "one"), ASN_NETS, names)  # history keeps the names of its day

    # a corrupt database: refused, the previous one stays in use, status says so
    (cfg.files / "asn.mmdb").write_bytes(b"\x00\x01 truncated download" * 50)
    produce(cfg, "three", rows_of(FLOWS))
    ingest.run(cfg, once=True)
    check_rows(lake(cfg, "three"), new_asn, names2)
    st = status_json(cfg)
    assert "asn.mmdb: not a MaxMind DB file" in st["sources"]["asn"]["error"]
    assert any("asn_database refused" in w and "still using" in w for w in st["warnings"])
    table = subprocess.run([sys.executable, "-m", "flowlake.cli", "status"], env={**cfg.env, "COLUMNS": "250"},
                           capture_output=True, text=True, timeout=120).stdout
    assert "enrichment at ingest" in table and "GeoLite2-City" in table and "asn_database refused" in table


def test_older_lake_hours_without_the_columns_still_read(ecfg, spark):
    """A lake hour written before enrichment (wire columns only) beside an enriched one:
    Spark's reader, DuckDB, compaction and the rollups all take both."""
    from flowlake.jobs.context import JobContext
    from flowlake.pipelines import compact, rollups
    from flowlake.schemas import FLOW, messages

    cfg = ecfg
    old = cfg.lake / "flows" / "date=2026-11-20" / "hour=10" / "b000000000999-00000.zstd.parquet"
    rows = [{"time_start": HOUR, "time_end": HOUR, "exporter": "127.0.0.2", "input_if": 3, "output_if": 7,
             "src_addr": "10.1.1.1", "dst_addr": "10.2.2.2", "src_port": 1, "dst_port": 2, "proto": 17, "tcp_flags": 0,
             "tos": 0, "packets": 1, "bytes": 77, "sampling_rate": 1, "src_as": 0, "dst_as": 0, "source_file": "old",
             "file_seq": 0}]
    pq.write_table(pa.Table.from_pylist(rows, schema=messages.arrow_schema(FLOW)), old, coerce_timestamps="us")
    # committed to the table as an older writer did (its own app id: the ingest's batches go on)
    from flowlake.pipelines import flow_ingest

    assert delta.commit_batch_files(cfg.lake / "flows", [(old, flow_ingest.partition_of(old))],
                                    flow_ingest.table_schema(), flow_ingest.PARTITION_BY, "older-writer", 0)
    enriched = len(lake(cfg, "one")) + len(lake(cfg, "two")) + len(lake(cfg, "three"))

    ctx = JobContext(spark, cfg, HOUR.date())
    df = ctx.flows()
    got: dict = {}
    for r in df.select("source_file", "src_country").collect():
        got.setdefault(r.source_file, []).append(r.src_country)
    assert df.count() == enriched + 1 and got["old"] == [None] and sorted(got["one"]) == ["CH", "CH", "DE", "US"]

    hour = next(h for h in compact.hours(cfg.lake / "flows") if h.date == "2026-11-20" and h.hour == 10)
    out = compact.compact_hour(cfg, cfg.lake / "flows", hour, compact.Settings.from_config(cfg))
    assert out["rows"] == enriched + 1 and out["carried"] == 0
    assert [r["src_country"] for r in lake(cfg, "old")] == [None]

    rollups.update_hour(cfg, "2026-11-20", 10, hour.path)
    r = duckdb.connect().execute(
        f"select coalesce(src_country, '?'), coalesce(dst_net_name, '?'), sum(bytes) from "
        f"read_parquet('{cfg.lake}/rollups/1h/date=2026-11-20/rollup.parquet') group by all order by all").fetchall()
    assert ("?", "?", 77.0) in r, "the old hour's flow rolls up with null enrichment"
    assert ("CH", "physics", 3000.0) in r, "enriched flows roll up by country and network"


def test_enriched_top_report_equals_duckdb_over_the_lake(ecfg, spark):
    """The job's Spark lists against DuckDB's own sums over the same lake day (the old
    hour's row included: its values count as unknown)."""
    from flowlake.jobs import enriched_top
    from flowlake.jobs.context import JobContext

    cfg = ecfg
    ctx = JobContext(spark, cfg, HOUR.date())
    enriched_top.run(ctx)
    con = duckdb.connect()
    got = con.execute(f"select hour, dimension, side, value, rank, flows, bytes, bytes_share from read_parquet("
                      f"'{cfg.lake}/reports/enriched_top/date=2026-11-20/*.parquet')").fetchall()
    delta.duckdb_load_delta(con)  # lake/flows is a Delta table (its folders also hold the replaced files)
    flows = f"(select * from delta_scan('{cfg.lake}/flows') where date = '2026-11-20')"
    ref = {
        ("country", "in"): "coalesce(src_country, '')", ("country", "out"): "coalesce(dst_country, '')",
        ("as", "in"): "CASE WHEN src_as = 0 THEN '' ELSE CAST(src_as AS VARCHAR) END",
        ("network", "out"): "coalesce(dst_net_name, '')", ("provider", "in"): "coalesce(in_if_provider, '')",
        ("interface", "out"): "coalesce(nullif(exporter_name, ''), exporter) || ' ' || "
                              "coalesce(nullif(out_if_name, ''), 'if' || CAST(output_if AS VARCHAR))",
    }
    total = con.execute(f"select sum(bytes) from {flows}").fetchone()[0]
    for (dim, side), sql in ref.items():
        want = dict(con.execute(f"select {sql}, sum(bytes) from {flows} group by 1").fetchall())
        for hour in (None, 10):  # the whole day and its one hour hold the same flows here
            mine = {v: (b, s) for h, d, sd, v, r, f, b, s in got if (h, d, sd) == (hour, dim, side)}
            assert {v: b for v, (b, _) in mine.items()} == want, (dim, side, hour)
            assert sum(s for _, s in mine.values()) == pytest.approx(1.0)
    providers = {v for h, d, sd, v, r, f, b, s in got if (h, d, sd) == (None, "provider", "in")}
    assert providers == {"ams-ix", "cogent", ""}, "input interfaces 3, 7 (batch one), the rest unclassified"
    # top_n 2: the rest folds into one 'other' row of rank 3; every list still adds up
    small = enriched_top.enriched_top(ctx.flows(), 2).where("hour IS NULL AND dimension = 'interface'").collect()
    for side in ("in", "out"):
        rows = [r for r in small if r.side == side]
        assert sorted(r.rank for r in rows) == [1, 2, 3] and next(r for r in rows if r.rank == 3).value == "other"
        assert sum(r.bytes for r in rows) == total
