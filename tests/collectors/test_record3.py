"""Flow record revision 3 end to end (issue 32, part 1): the traffic model exports next hops,
direction, masks, forwarding status, MACs, MPLS stacks, VRFs, NAT and biflow out counters
(collectors/traffic/record3.py) in v9 and IPFIX, a real nfcapd 1.7.1 stores what it keeps,
the shipper reads it (a biflow as two one-way rows), both wire formats carry it, the lake
equals the model's truth row for row, `nfdump -o json` agrees on every field it prints,
and messages of revision 2 still land (the new columns null)."""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import struct
import subprocess
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from test_shipper import dump

import nfcapd_capture
import pcapgen
from conftest import run
from flowlake.base import config, delta
from flowlake.collectors import kafka as kafka_service
from flowlake.collectors import ship as ship_mod
from flowlake.collectors.traffic import api, lake_rows, model, record3
from flowlake.collectors.traffic.exporter import wait_drained
from flowlake.pipelines import hour_close, ingest
from flowlake.schemas import FLOW, FLOWS_TABLE, avro, messages
from flowlake.schemas.flow import FLOW_REV2, FLOW_REV3, FLOW_REVISIONS

START = dt.datetime(2026, 4, 8, 0, 0, tzinfo=dt.UTC)
OLD_DAY = dt.date(2026, 4, 9)
KEYS = ("exporter", "time_start", "time_end", "src_addr", "dst_addr", "src_port", "dst_port", "proto",
        "input_if", "output_if", "packets", "bytes", "src_as", "dst_as", "src_vlan", "dst_vlan")


def rev3_names() -> list[str]:
    return FLOW_REV3.names[21:]


def model_capture(spool: Path, protocol: str):
    """Half an hour of modelled traffic (2,000 flows, every router exporting revision 3,
    unsampled so counts compare one to one) through a real nfcapd: (its file, truth, params)."""
    params = api.params_for(protocol)
    for r in params.routers:
        r.sampling_rate, r.sampling, r.record3 = 1, None, True
    docs = {}

    def feed(port: int) -> None:
        docs["truth"] = api.generate_day(("127.0.0.1", port), START, 1800, 2000, protocol, None, seed=32,
                                         params=params, max_rate=50_000)
        wait_drained(port)

    nf, _ = nfcapd_capture.capture(spool, feed, ["-B", str(8 << 20)])
    return nf, docs["truth"], params


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    for tool in ("nfcapd", "nfdump"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: run `make setup`")
    ship_mod.build_binary()
    return {p: model_capture(tmp_path_factory.mktemp(f"rec3-{p}") / "spool", p) for p in ("ipfix", "v9")}


def truth_rows(truth: dict, params, protocol: str) -> list[dict]:
    return record3.lake_rows(truth["_flows"], truth["_record3"], params, 10 if protocol == "ipfix" else 9)


def as_key(r: dict, names) -> tuple:
    return tuple(tuple(r[k]) if isinstance(r[k], list) else r[k] for k in (*KEYS, *names))


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ["ipfix", "v9"])
def test_the_shipper_reads_what_the_model_exported(captures, protocol):
    nf, truth, params = captures[protocol]
    rows = dump(nf)
    want = truth_rows(truth, params, protocol)
    names = rev3_names()
    got, exp = Counter(as_key(r, names) for r in rows), Counter(as_key(r, names) for r in want)
    missing, extra = exp - got, got - exp
    assert not missing and not extra, (protocol, list(missing)[:3], list(extra)[:3])
    halves = Counter(r["biflow_half"] for r in rows)
    assert halves[1] == halves[2] > 50 and halves[0] > 1000, halves
    assert truth["record3"]["lake_rows"] == len(rows) and truth["record3"]["biflows"] == halves[2]
    assert truth["record3"]["reverse_bytes"] == sum(r["bytes"] for r in rows if r["biflow_half"] == 2)
    # exactly-once keys: one row per (source_file, file_seq); a reverse half is -(its record's + 1)
    seqs = [r["file_seq"] for r in rows]
    assert len(set(seqs)) == len(seqs)
    by_seq = {r["file_seq"]: r for r in rows}
    for r in rows:
        if r["biflow_half"] == 2:
            init = by_seq[-r["file_seq"] - 1]
            assert init["biflow_half"] == 1 and (init["src_addr"], init["dst_addr"]) == (r["dst_addr"], r["src_addr"])
    # what the model exported and nfcapd kept: every column has values, forwarding status only from v9
    for name in names:
        filled = sum(r[name] is not None for r in rows)
        assert filled > 0 or (name == "forwarding_status" and protocol == "ipfix"), (protocol, name)
    dropped = sum(r["forwarding_status"] is not None and r["forwarding_status"] >= 128 for r in rows)
    assert (dropped > 0) == (protocol == "v9")
    assert any(r["mpls_labels"] and len(r["mpls_labels"]) == 3 for r in rows)


def nfdump_records(nf: Path) -> list[dict]:
    out = run(["nfdump", "-r", str(nf), "-o", "json"]).stdout
    return json.loads(out, object_pairs_hook=dict)


def mpls_of(rec: dict) -> list[int] | None:
    labels = []
    for k in range(1, 11):
        label, _, bos = (int(v) for v in rec.get(f"mpls_{k}", "0-0-0").split("-"))
        if (label, bos) == (0, 0):
            break
        labels.append(label)
        if bos:
            break
    return labels or None


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ["ipfix", "v9"])
def test_nfdump_prints_the_same_fields(captures, protocol):
    """nfdump -o json, record by record in file order, against the shipper's initiator rows."""
    nf, _, _ = captures[protocol]
    rows = dump(nf)
    ours = sorted((r for r in rows if r["biflow_half"] != 2), key=lambda r: r["file_seq"])
    reverse = {-r["file_seq"] - 1: r for r in rows if r["biflow_half"] == 2}
    recs = nfdump_records(nf)
    assert len(recs) == len(ours)
    checked = Counter()
    for rec, r in zip(recs, ours, strict=True):
        v6 = "src6_addr" in rec
        assert r["src_addr"] == rec["src6_addr" if v6 else "src4_addr"]
        if "direction" in rec:
            assert (r["flow_direction"], r["src_mask"], r["dst_mask"]) == (
                rec["direction"], rec["src_mask"], rec["dst_mask"])
            assert r["forwarding_status"] == (rec["fwd_status"] or None)
            checked["misc"] += 1
        nh, bgp = ("ip6_next_hop", "bgp6_next_hop") if v6 else ("ip4_next_hop", "bgp4_next_hop")
        assert r["next_hop"] == rec.get(nh) and r["bgp_next_hop"] == rec.get(bgp)
        if "in_src_mac" in rec:
            zero = "00:00:00:00:00:00"
            src = rec["in_src_mac"] if rec["in_src_mac"] != zero else rec["out_src_mac"]
            dst = rec["in_dst_mac"] if rec["in_dst_mac"] != zero else rec["out_dst_mac"]
            assert (r["src_mac"], r["dst_mac"]) == (None if src == zero else src, None if dst == zero else dst)
            checked["mac"] += 1
        assert r["mpls_labels"] == mpls_of(rec)
        if "ingress_vrf" in rec:
            assert (r["ingress_vrf"], r["egress_vrf"]) == (int(rec["ingress_vrf"]), int(rec["egress_vrf"]))
            checked["vrf"] += 1
        assert r["src_addr_nat"] == rec.get("src4_xlt_ip", rec.get("src6_xlt_ip"))
        assert r["dst_addr_nat"] == rec.get("dst4_xlt_ip", rec.get("dst6_xlt_ip"))
        if "src_xlt_port" in rec:
            assert (r["src_port_nat"], r["dst_port_nat"]) == (int(rec["src_xlt_port"]), int(rec["dst_xlt_port"]))
            checked["nat"] += 1
        if "nat_event_id" in rec:
            assert r["nat_event"] == int(rec["nat_event_id"])
        if "icmp_type" in rec:
            assert (r["icmp_type"], r["icmp_code"]) == (rec["icmp_type"], rec["icmp_code"])
            checked["icmp"] += 1
        else:
            assert r["icmp_type"] is None
        if rec.get("out_packets") or rec.get("out_bytes"):
            rev = reverse[r["file_seq"]]
            assert (rev["packets"], rev["bytes"]) == (rec["out_packets"], rec["out_bytes"]) and r["biflow_half"] == 1
            checked["biflow"] += 1
        else:
            assert r["biflow_half"] == 0
    assert min(checked[k] for k in ("misc", "mac", "vrf", "nat", "icmp", "biflow")) > 0, checked


@pytest.mark.integration
def test_both_formats_land_revision_3_and_revision_2_messages_read_null(captures, kafka, tmp_path_factory):
    cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(tmp_path_factory.mktemp("rec3-home")),
                           "FLOWLAKE_KAFKA_FLOWS_TOPIC": "flows.test-rec3",
                           "FLOWLAKE_KAFKA_ACTIVE_TOPIC": "active.test-rec3",
                           "FLOWLAKE_KAFKA_LEDGER_TOPIC": "ledger.test-rec3"})
    kafka_service.ensure_topics(cfg)
    nf, truth, params = captures["ipfix"]
    spool = cfg.path("nfcapd")
    spool.mkdir(parents=True)
    files = {"avro": spool / "nfcapd.202604080000", "arrow": spool / "nfcapd.202604080005"}
    for fmt, path in files.items():
        shutil.copy(nf, path)
        res = subprocess.run(ship_mod.ship_argv(cfg, [path], extra=("--format", fmt)), capture_output=True,
                             text=True, env=ship_mod.child_env(cfg))
        assert res.returncode == 0, res.stderr[-2000:]
    rows = dump(nf)
    when = dt.datetime.combine(OLD_DAY, dt.time(1), dt.UTC)
    old = [{k: v for k, v in r.items() if k in FLOW_REV2.names} for r in rows[:5]]
    old = [{**r, "time_start": when, "time_end": when, "source_file": "old-rev2", "file_seq": i}
           for i, r in enumerate(old)]
    p = Producer({"bootstrap.servers": cfg.kafka_bootstrap})
    p.produce(cfg.kafka.flows_topic, messages.encode_flow_batch(FLOW_REV2, old[:3]), key="rev2-batch")
    for r in old[3:]:
        p.produce(cfg.kafka.flows_topic, avro.encode(FLOW_REV2, r), key="rev2-avro")
    assert p.flush(30) == 0

    ingest.run(cfg, once=True)
    assert ingest.counts(cfg)["flows"] == {"rows": 2 * len(rows) + 5, "quarantined": 0}
    names = rev3_names()
    cols = ", ".join(("file_seq", *KEYS[1:], *names))
    con = duckdb.connect()
    want = sorted(as_key({**r, "time_start": r["time_start"], "time_end": r["time_end"]}, names)[1:]
                  for r in rows)
    truth_keys = Counter(as_key(r, names)[1:] for r in truth_rows(truth, params, "ipfix"))
    def flows() -> str:  # the Delta table's newest version (replaced files wait on disk for VACUUM)
        return f"read_parquet({delta.version_files(cfg.lake / 'flows')[1]!r}, union_by_name = true)"

    def check(when: str) -> None:
        for fmt, path in files.items():
            got = con.execute(f"select {cols}, epoch_ms(time_start) as ts, epoch_ms(time_end) as te "
                              f"from {flows()} "
                              "where source_file = ? order by file_seq", [path.name]).fetchall()
            lake = [dict(zip(("file_seq", *KEYS[1:], *names, "ts", "te"), g, strict=True)) for g in got]
            lake = [{**r, "time_start": r["ts"], "time_end": r["te"], "exporter": None} for r in lake]
            mine = sorted(as_key(r, names)[1:] for r in lake)
            assert mine == want, f"{when}, {fmt}: the lake's rows equal the file's"
            assert Counter(mine) == truth_keys, f"{when}, {fmt}: the lake equals the model's truth"
            assert [r["file_seq"] for r in lake] == sorted(r["file_seq"] for r in rows)

    check("ingested")
    # the compactor rewrites the hours with the new columns kept (MPLS lists included)
    done = hour_close.run(cfg, settle=False, force=True)
    assert done and all(r["rows"] for r in done)
    assert not [f for f in delta.version_files(cfg.lake / "flows")[1] if Path(f).name.startswith("b")], \
        "every batch file compacted"
    check("compacted")
    got = con.execute(f"select {', '.join(names)}, count(*) from {flows()} "
                      "where source_file = 'old-rev2' group by all").fetchall()
    assert got == [(*[None] * len(names), 5)]


def test_revision_2_is_frozen_and_3_appends_the_contract_columns():
    assert avro.fingerprint(FLOW_REV2).hex() == "e0818c6619706bb5"
    assert FLOW_REVISIONS[-3:-1] == (FLOW_REV2, FLOW_REV3) and FLOW.names[:21] == FLOW_REV2.names
    contract = [("flow_direction", "int"), ("next_hop", "string"), ("bgp_next_hop", "string"), ("src_mask", "int"),
                ("dst_mask", "int"), ("src_mac", "string"), ("dst_mac", "string"), ("mpls_labels", "array_int"),
                ("ingress_vrf", "long"), ("egress_vrf", "long"), ("forwarding_status", "int"), ("icmp_type", "int"),
                ("icmp_code", "int"), ("src_addr_nat", "string"), ("dst_addr_nat", "string"), ("src_port_nat", "int"),
                ("dst_port_nat", "int"), ("nat_event", "int"), ("biflow_half", "int")]
    assert [(f.name, f.type) for f in FLOW_REV3.fields[21:]] == contract and FLOW.names[:40] == FLOW_REV3.names
    assert all(f.nullable and f.default is None for f in FLOW_REV3.fields[21:])


def conversations_pcap(path: Path, n: int) -> dict[tuple[str, int], tuple[int, int]]:
    """n TCP conversations, 3 packets of 100 bytes each way out and 3 of 1,000 back, an hour
    ago: (client, client port) -> (bytes out, bytes back)."""
    t = float(int(dt.datetime.now(dt.UTC).timestamp()) - 3600)
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i in range(n):
            a, b = f"10.1.{i // 250}.{i % 250 + 1}", "192.0.2.7"
            for _ in range(3):
                for s, d, sp, dp, size in ((a, b, 40000 + i, 443, 100), (b, a, 443, 40000 + i, 1000)):
                    pkt = pcapgen.packet(s, d, 6, sp, dp, size)
                    t += 0.001
                    out.write(struct.pack("<IIII", int(t), int((t % 1) * 1e6), len(pkt), len(pkt)) + pkt)
    return {(f"10.1.{i // 250}.{i % 250 + 1}", 40000 + i): (300, 3000) for i in range(n)}


@pytest.mark.integration
@pytest.mark.parametrize("version", [9, 10])
@pytest.mark.parametrize("rate", [1, 10])
def test_softflowd_biflows_land_as_both_halves(tmp_path, version, rate):
    """Real `softflowd -b` from a pcap of known conversations, real nfcapd (`-s` for the
    sampled case): every conversation's two directions land with the bytes the pcap
    moved (times the rate). softflowd -b exports IPFIX as one record with reverse counters
    (nfcapd keeps them: two rows, biflow_half 1 and 2) and v9 as two records, one per
    direction (flow_direction 0 and 1: biflow_half 0)."""
    ship_mod.build_binary()
    truth = conversations_pcap(tmp_path / "bi.pcap", 100)

    def feed(port: int) -> None:
        run(["softflowd", "-b", "-r", str(tmp_path / "bi.pcap"), "-n", f"127.0.0.1:{port}", "-v", str(version),
             "-m", "100000"])
        wait_drained(port)  # nfcapd has read every datagram before it is stopped

    # nfcapd must be listening before softflowd's one burst (its template first): settle longer
    extra = ["-B", str(8 << 20), *(["-s", str(rate)] if rate > 1 else [])]
    nf, _ = nfcapd_capture.capture(tmp_path / "spool", feed, extra, settle=1.5)
    rows = dump(nf)
    got: dict[tuple[str, int], list[int]] = {}
    for r in rows:
        out = r["src_port"] != 443
        key = (r["src_addr"], r["src_port"]) if out else (r["dst_addr"], r["dst_port"])
        got.setdefault(key, [0, 0])[0 if out else 1] += r["bytes"]
    assert got == {k: [o * rate, b * rate] for k, (o, b) in truth.items()}
    halves = Counter(r["biflow_half"] for r in rows)
    if version == 10:
        assert halves == {1: len(truth), 2: len(truth)}
        assert len({r["file_seq"] for r in rows}) == len(rows)
    else:
        assert halves == {0: 2 * len(truth)}
        assert Counter(r["flow_direction"] for r in rows) == {0: len(truth), 1: len(truth)}


@pytest.mark.parametrize("version", [9, 10])
def test_the_fast_lake_path_lands_revision_3_as_the_pipeline_does(version):
    """lake_rows.lake_table(record3=...) (histories and benches without the network) holds
    the rows record3.lake_rows says the pipeline lands, biflows as two rows, file_seq unique."""
    params = api.params_for("ipfix" if version == 10 else "v9")
    for r in params.routers:
        r.sampling_rate, r.sampling, r.record3 = 1, None, True
    start = int(START.timestamp() * 1000)
    f, _ = model.generate(params, start, 3_600_000, 1500, seed=7, allow_v6=True)
    x = record3.draw(f, 7)
    table = lake_rows.lake_table(f, params, version=version, record3=x)
    assert table.column_names == FLOW.names[:19] + ["src_vlan", "dst_vlan"] + FLOW_REV3.names[21:] + ["date", "hour"]
    names = rev3_names()
    ms = {"time_start", "time_end"}
    got = [{k: int(v.timestamp() * 1000) if k in ms else v for k, v in r.items()} for r in table.to_pylist()]
    want = record3.lake_rows(f, x, params, version)
    assert Counter(as_key(r, names) for r in got) == Counter(as_key(r, names) for r in want)
    seqs = table.column("file_seq").to_pylist()
    assert len(set(seqs)) == len(seqs) and min(seqs) < 0
    assert table.schema.field("mpls_labels").type == pa.list_(pa.int32())


@pytest.mark.integration
def test_spark_reads_revision_3_beside_older_files(spark, tmp_path):
    """An hour holding a file from before revision 3 and one with it: Spark reads both with
    the lake's declared schema (the older rows' new columns null, MPLS stacks as array<int>)."""
    params = api.params_for("ipfix")
    for r in params.routers:
        r.sampling_rate, r.sampling, r.record3 = 1, None, True
    f, _ = model.generate(params, int(START.timestamp() * 1000), 600_000, 400, seed=3, allow_v6=True)
    new = lake_rows.lake_table(f, params, source_file="new", record3=record3.draw(f, 3))
    old = lake_rows.lake_table(f, params, source_file="old")
    hour = tmp_path / "flows" / "date=2026-04-08" / "hour=0"
    hour.mkdir(parents=True)
    pq.write_table(old.drop_columns(["date", "hour"]), hour / "old.parquet", compression="zstd")
    pq.write_table(new.drop_columns(["date", "hour"]), hour / "new.parquet", compression="zstd")
    df = spark.read.option("basePath", str(tmp_path / "flows")).schema(FLOWS_TABLE.spark_schema()) \
        .parquet(str(tmp_path / "flows" / "date=2026-04-08"))
    got = {(r["source_file"], r["file_seq"]): (r["mpls_labels"], r["biflow_half"], r["src_addr_nat"])
           for r in df.select("source_file", "file_seq", "mpls_labels", "biflow_half", "src_addr_nat").collect()}
    want = {("new", s): (m, b, n) for s, m, b, n in zip(*(new.column(c).to_pylist() for c in
                                                         ("file_seq", "mpls_labels", "biflow_half", "src_addr_nat")),
                                                       strict=True)}
    want |= {("old", s): (None, None, None) for s in old.column("file_seq").to_pylist()}
    assert got == want
    stacked = new.filter(new.column("mpls_labels").is_valid()).column("mpls_labels").to_pylist()[0]
    hits = df.where(f"array_contains(mpls_labels, {stacked[0]})").count()
    assert hits == sum(1 for m in new.column("mpls_labels").to_pylist() if m and stacked[0] in m)
