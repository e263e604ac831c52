"""VLANs end to end (issue 26): the traffic model exports them (v9 SRC_VLAN/DST_VLAN 58/59,
IPFIX vlanId/postVlanId 58/59, and dot1qVlanId/postDot1qVlanId 243/254 from one router),
a real nfcapd stores what it maps, the shipper reads them from its files, both wire
formats carry them, messages of the Flow revision before VLANs still land (VLAN 0), and
vlan_mix equals nfdump's own `-s srcvlan` / `-s dstvlan` and the model's truth."""
from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer

import lake_sql
import nfcapd_capture
from conftest import run
from test_shipper import dump

START = dt.datetime(2026, 4, 8, 0, 0, tzinfo=dt.timezone.utc)
OLD_DAY = dt.date(2026, 4, 9)


def model_capture(spool: Path, protocol: str):
    """An hour of modelled border traffic (3,000 flows, routers unsampled so bytes compare
    one to one) through a real nfcapd; returns (its file, the truth)."""
    from flowlake.collectors.traffic import api
    from flowlake.collectors.traffic.exporter import wait_drained

    params = api.params_for(protocol)
    for r in params.routers:
        r.sampling_rate, r.sampling = 1, None
    docs = {}

    def feed(port: int) -> None:
        docs["truth"] = api.generate_day(("127.0.0.1", port), START, 3600, 3000, protocol, None, seed=26,
                                         params=params, max_rate=50_000)
        wait_drained(port)

    nf, _ = nfcapd_capture.capture(spool, feed, ["-B", str(8 << 20)])
    return nf, docs["truth"]


@pytest.fixture(scope="module")
def captures(tmp_path_factory, nfdump_bin_module):
    from flowlake.collectors import ship

    ship.build_binary()
    return {p: model_capture(tmp_path_factory.mktemp(f"vlan-{p}") / "spool", p) for p in ("ipfix", "v9")}


@pytest.fixture(scope="module")
def nfdump_bin_module():
    for tool in ("nfcapd", "nfdump"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: run `make setup`")


def nfdump_vlans(nf: Path, stat: str) -> dict[int, tuple[int, int, int]]:
    """`nfdump -s srcvlan|dstvlan`: VLAN -> (flows, packets, bytes), nfdump's own counting."""
    out = run(["nfdump", "-r", str(nf), "-s", f"{stat}/flows", "-n", "0", "-q", "-N", "-o", "csv"]).stdout
    lines = [ln.split(",") for ln in out.splitlines() if ln.strip()]
    head = lines[0]
    col = {k: head.index(k) for k in ("val", "fl", "ipkt", "ibyt")}
    return {int(c[col["val"]]): (int(c[col["fl"]]), int(c[col["ipkt"]]), int(c[col["ibyt"]])) for c in lines[1:]}


def truth_vlans(truth: dict, side: str, times: int = 1) -> dict[int, tuple[int, int, int]]:
    return {int(v): (c["flows"] * times, c["packets"] * times, c["bytes"] * times)
            for v, c in truth["per_vlan"][side].items()}


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ["ipfix", "v9"])
def test_nfcapd_stores_the_model_s_vlans_and_the_shipper_reads_them(captures, protocol):
    nf, truth = captures[protocol]
    rows = dump(nf)
    for side, stat, key in (("in", "srcvlan", "src_vlan"), ("out", "dstvlan", "dst_vlan")):
        ours = defaultdict(lambda: [0, 0, 0])
        for r in rows:
            o = ours[r[key]]
            o[0], o[1], o[2] = o[0] + 1, o[1] + r["packets"], o[2] + r["bytes"]
        assert {k: tuple(v) for k, v in ours.items()} == nfdump_vlans(nf, stat) == truth_vlans(truth, side), (protocol, side)
    # measured: nfcapd 1.7.1 keeps border-c's dot1q VLANs (243/254) from v9, drops them from IPFIX
    border_c = {v for v in truth["per_vlan"]["in"] if v in ("102", "230", "231", "232", "233")}
    assert (border_c != set()) == (protocol == "v9")
    assert truth["per_vlan"]["in"]["0"]["flows"] if protocol == "ipfix" else "0" not in truth["per_vlan"]["in"]


@pytest.mark.integration
def test_avro_and_flowbatch_carry_vlans_old_revision_messages_land_as_vlan_0(captures, kafka, spark, tmp_path_factory):
    from flowlake.base import config
    from flowlake.collectors import kafka as kafka_service
    from flowlake.collectors import ship as ship_mod
    from flowlake.jobs import runner
    from flowlake.pipelines import ingest
    from flowlake.schemas import avro, messages
    from flowlake.schemas.flow import FLOW_REV1

    cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(tmp_path_factory.mktemp("vlan-home")),
                           "FLOWLAKE_KAFKA_FLOWS_TOPIC": "flows.test-vlan",
                           "FLOWLAKE_KAFKA_ACTIVE_TOPIC": "active.test-vlan",
                           "FLOWLAKE_KAFKA_LEDGER_TOPIC": "ledger.test-vlan"})
    kafka_service.ensure_topics(cfg)
    nf, truth = captures["ipfix"]
    spool = cfg.path("nfcapd")
    spool.mkdir(parents=True)
    files = {"avro": spool / "nfcapd.202604080000", "arrow": spool / "nfcapd.202604080005"}
    for fmt, path in files.items():
        shutil.copy(nf, path)
        res = subprocess.run(ship_mod.ship_argv(cfg, [path], extra=("--format", fmt)), capture_output=True,
                             text=True, env=ship_mod.child_env(cfg))
        assert res.returncode == 0, res.stderr[-2000:]
    # messages of the revision before VLANs, as an older shipper left them in the topic
    when = dt.datetime.combine(OLD_DAY, dt.time(1), dt.timezone.utc)
    old = [{k: v for k, v in r.items() if k in FLOW_REV1.names} for r in dump(nf)[:5]]
    old = [{**r, "time_start": when, "time_end": when, "source_file": "old-rev1", "file_seq": i} for i, r in enumerate(old)]
    p = Producer({"bootstrap.servers": cfg.kafka_bootstrap})
    p.produce(cfg.kafka.flows_topic, messages.encode_flow_batch(FLOW_REV1, old[:3]), key="rev1-batch")
    for r in old[3:]:
        p.produce(cfg.kafka.flows_topic, avro.encode(FLOW_REV1, r), key="rev1-avro")
    assert p.flush(30) == 0

    ingest.run(cfg, once=True)
    assert ingest.counts(cfg)["flows"] == {"rows": 2 * len(dump(nf)) + 5, "quarantined": 0}
    con = duckdb.connect()
    want = [(r["file_seq"], r["src_vlan"], r["dst_vlan"]) for r in dump(nf)]
    for fmt, path in files.items():
        got = con.execute(f"select file_seq, src_vlan, dst_vlan from {lake_sql.source(cfg.lake)} "
                          "where source_file = ? order by file_seq", [path.name]).fetchall()
        assert got == want, f"{fmt}: the lake's VLANs equal the file's"
    got = con.execute(f"select src_vlan, dst_vlan, count(*) from {lake_sql.source(cfg.lake)} "
                      "where source_file = 'old-rev1' group by all").fetchall()
    assert got == [(0, 0, 5)]

    # vlan_mix over the two copies of the hour: twice nfdump's own per-VLAN statistics
    day = START.date()
    out = runner.run_jobs(spark, cfg, day, runner.order(runner.discover(), ["vlan_mix"]))
    assert [(o.job, o.status, o.error) for o in out] == [("vlan_mix", "ok", "")]
    rows = pq.read_table(cfg.lake / "reports" / "vlan_mix" / f"date={day}").to_pylist()
    for side, stat in (("in", "srcvlan"), ("out", "dstvlan")):
        mine = {r["vlan"]: (r["flows"], r["packets"], r["bytes"]) for r in rows
                if r["hour"] is None and r["direction"] == "all" and r["side"] == side}
        assert mine == {v: tuple(2 * x for x in c) for v, c in nfdump_vlans(nf, stat).items()} == truth_vlans(truth, side, 2)
        shares = [r["bytes_share"] for r in rows if r["hour"] is None and r["direction"] == "all" and r["side"] == side]
        assert sum(shares) == pytest.approx(1.0)
    # by direction: the model's inbound flows enter on the uplinks' VLANs 100/101 (border-c's
    # dot1q VLANs are dropped from IPFIX: 0)
    f = truth["_flows"]
    inbound_in = Counter(int(v) for v in np.where(f["router"] == 2, 0, f["src_vlan"])[f["inbound"]])
    mine = {r["vlan"]: r["flows"] for r in rows
            if r["hour"] is None and r["direction"] == "inbound" and r["side"] == "in"}
    assert mine == {v: 2 * n for v, n in inbound_in.items()} and set(mine) == {0, 100, 101}
    hourly = sum(r["bytes"] for r in rows if r["hour"] is not None and r["direction"] == "all" and r["side"] == "in")
    assert hourly == 2 * sum(c["bytes"] for c in truth["per_vlan"]["in"].values())


def test_old_revision_fingerprint_is_pinned():
    """A shipped revision never changes: its fingerprint is what old messages carry."""
    from flowlake.schemas import FLOW, avro
    from flowlake.schemas.flow import FLOW_REV1, FLOW_REV2, FLOW_REVISIONS

    assert avro.fingerprint(FLOW_REV1).hex() == "d51f95d6753c71f1"
    assert avro.fingerprint(FLOW_REV2).hex() == "e0818c6619706bb5"
    assert FLOW_REVISIONS[-1] is FLOW and FLOW.names[:19] == FLOW_REV1.names
    assert FLOW_REV2.names[19:] == ["src_vlan", "dst_vlan"] and FLOW.names[:21] == FLOW_REV2.names


def test_revisions_encode_with_their_own_schema_in_one_process():
    """Revisions share the record's name: encoding one must not change how the other encodes."""
    from flowlake.pipelines.flow_messages import ROW, FlowDecoder
    from flowlake.schemas import FLOW, avro
    from flowlake.schemas.flow import FLOW_REV1

    t = dt.datetime(2026, 4, 8, tzinfo=dt.timezone.utc)
    r = {"time_start": t, "time_end": t, "exporter": "127.0.0.2", "input_if": 1, "output_if": 2, "src_addr": "10.0.0.1",
         "dst_addr": "203.0.113.1", "src_port": 1, "dst_port": 2, "proto": 6, "tcp_flags": 0, "tos": 0, "packets": 1,
         "bytes": 2, "sampling_rate": 1, "src_as": 0, "dst_as": 0, "source_file": "f", "file_seq": 0}
    dec = FlowDecoder()
    old = dec.decode(avro.encode(FLOW_REV1, r))
    new = dec.decode(avro.encode(FLOW, {**r, "src_vlan": 210, "dst_vlan": 100}))
    assert old[0] == new[0] == ROW
    assert (old[1]["src_vlan"], old[1]["dst_vlan"]) == (0, 0) and (new[1]["src_vlan"], new[1]["dst_vlan"]) == (210, 100)
