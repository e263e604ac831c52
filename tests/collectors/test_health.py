"""Exporter health (issue 20) against a real nfcapd, the real shipper and a real broker.

Three routers export to the stack's own nfcapd (`collectors/nfcapd.start`, 2 s files) from
their own loopback addresses, every quarter second, flows that end as they are sent:
  A  NetFlow v9, domain 7: the test drops four of its data datagrams (one run of two);
  B  IPFIX, domain 9, its clock 120 s ahead: three drops (one run of two);
  C  NetFlow v5, engine 3, sampled 1:10 (nfcapd scales it): stops after two seconds.
`flowlake ship --pending` ships the files (after a SIGKILLed attempt), and the health rows
in Kafka, `flowlake status --json`, the lake (after an ingest) and `nfdump -E` must say
exactly what was sent: flows, bytes and datagrams per exporter, one sequence failure per
gap, C's sampler, B's skew, and C silent once it stopped for health.silent_after_seconds.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import lake_sql  # noqa: E402
from conftest import free_port, run  # noqa: E402
from test_shipper import consume, decode  # noqa: E402

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
FLOWLAKE = str(REPO / ".venv" / "bin" / "flowlake")
SILENT_AFTER = 3                      # health.silent_after_seconds for this stack
TICK, RUN_S, C_STOPS_S = 0.25, 8.0, 2.0
SKEW_B_MS = 120_000


class Router:
    """One export process sending 6 flows a tick; `drops` maps tick -> indexes of the
    tick's data datagrams not sent (several: a run of lost datagrams, one gap)."""

    def __init__(self, version: int, domain: int, address: str, rate: int = 1, skew_ms: int = 0,
                 drops: dict[int, list[int]] | None = None, stop_s: float = RUN_S):
        from flowlake.collectors.traffic import exporter, netflow

        boot = int(time.time() * 1000) - 3_600_000 + skew_ms
        # small datagrams: each tick's flows take two or three data datagrams
        self.ex = netflow.Exporter(version, domain, boot, sampling_rate=rate, address=address, max_payload=200)
        self.sock = exporter.open_socket(address, "127.0.0.1")
        self.address, self.domain, self.version, self.rate, self.skew = address, domain, version, rate, skew_ms
        self.drops, self.stop_s = drops or {}, stop_s
        self.flows = self.packets = self.bytes = self.datagrams = self.gaps = 0
        self.last_sent_ms = 0

    def tick(self, k: int, target) -> None:
        from flowlake.collectors.traffic.model import FLOW_DTYPE

        now = int(time.time() * 1000) + self.skew
        f = np.zeros(6, FLOW_DTYPE)
        f["t_start"], f["t_end"] = now - 3000, now
        f["src4"] = 0x0A000000 + 256 * k + np.arange(6)
        f["dst4"], f["proto"], f["src_port"], f["dst_port"] = 0xC0000207, 6, 40000 + k, 443
        f["packets"] = 1 + np.arange(6)
        f["bytes"] = 60 * f["packets"] + k
        dropped = self.drops.get(k, [])
        self.gaps += bool(dropped)
        first, data_i = 0, -1
        for d in self.ex.datagrams(f):  # all IPv4 with one end time: records in order
            if d.flows:
                chunk, first, data_i = f[first:first + d.flows], first + d.flows, data_i + 1
                if data_i in dropped:
                    continue
                self.flows += d.flows
                self.packets += int(chunk["packets"].sum()) * self.rate
                self.bytes += int(chunk["bytes"].sum()) * self.rate  # nfcapd scales v5 sampling
            self.sock.sendto(d.payload, target)
            self.datagrams += 1
        self.last_sent_ms = int(time.time() * 1000)


@pytest.fixture(scope="module")
def hcfg(kafka, tmp_path_factory):
    """The session's broker; a home, collector port and topics of this module's own."""
    from flowlake.base import config
    from flowlake.collectors import kafka as kafka_service

    env = {**os.environ, "FLOWLAKE_HOME": str(tmp_path_factory.mktemp("health-home")),
           "FLOWLAKE_COLLECTOR_PORT": str(free_port(socket.SOCK_DGRAM)), "FLOWLAKE_COLLECTOR_ROTATE_SECONDS": "2",
           "FLOWLAKE_KAFKA_FLOWS_TOPIC": "flows.test-health", "FLOWLAKE_KAFKA_ACTIVE_TOPIC": "active.test-health",
           "FLOWLAKE_KAFKA_HEALTH_TOPIC": "health.test-health", "FLOWLAKE_KAFKA_LEDGER_TOPIC": "ledger.test-health",
           "FLOWLAKE_HEALTH_SILENT_AFTER_SECONDS": str(SILENT_AFTER)}
    c = config.load(env=env)
    c.env = env
    kafka_service.ensure_topics(c)
    return c


@pytest.fixture(scope="module")
def exported(hcfg):
    """Run the three routers against the stack's nfcapd; return them once nfcapd closed its files."""
    from flowlake.collectors import nfcapd
    from flowlake.collectors.traffic import exporter

    routers = [Router(9, 7, "127.0.0.21", drops={5: [0], 11: [1], 17: [0], 23: [0, 1]}),
               Router(10, 9, "127.0.0.22", skew_ms=SKEW_B_MS, drops={7: [0], 13: [0, 1], 19: [1]}),
               Router(5, 3, "127.0.0.23", rate=10, stop_s=C_STOPS_S)]
    nfcapd.start(hcfg)
    try:
        target = ("127.0.0.1", hcfg.collector.port)
        t0 = time.monotonic()
        for k in range(int(RUN_S / TICK)):
            for r in routers:
                if k * TICK < r.stop_s:
                    r.tick(k, target)
            time.sleep(max(0.0, t0 + (k + 1) * TICK - time.monotonic()))
        assert exporter.wait_drained(hcfg.collector.port), "nfcapd did not read its socket queue"
    finally:
        nfcapd.stop(hcfg)
    assert all(r.gaps for r in routers[:2]) and routers[2].gaps == 0
    return routers


def flowlake(hcfg, *args, **env) -> subprocess.CompletedProcess:
    return run([FLOWLAKE, *args], env={**hcfg.env, **env}, timeout=300)


@pytest.fixture(scope="module")
def shipped(hcfg, exported):
    """A shipper SIGKILLed inside a file's transaction, then `flowlake ship --pending`."""
    from flowlake.collectors import ship

    ship.build_binary()
    files = sorted(p for p in ship.spool_dir(hcfg).glob("nfcapd.*") if ".current." not in p.name)
    assert len(files) >= 4, files
    # 40 flows/s: the first file (about 140 flows) takes seconds; killed once its first
    # records are in the log, inside its transaction
    killed = subprocess.Popen(ship.ship_argv(hcfg, [], pending=True, extra=["--throttle", "40"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=hcfg.env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not consume(hcfg, hcfg.kafka.flows_topic, "read_uncommitted"):
            time.sleep(0.2)
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
    aborted = len(consume(hcfg, hcfg.kafka.flows_topic, "read_uncommitted"))
    assert aborted, "the killed shipper never began a file"
    flowlake(hcfg, "ship", "--pending")
    assert set(ship.read_ledger(hcfg)) == {p.name for p in files}
    return files


def rows_by_exporter(rows) -> dict[tuple[str, int], list[dict]]:
    out = defaultdict(list)
    for r in rows:
        out[(r["exporter"], r["observation_domain"])].append(r)
    return out


def health_rows(hcfg) -> list[dict]:
    from flowlake.schemas import avro
    from flowlake.schemas.health import EXPORTER_HEALTH_RECORD

    return [avro.decode(EXPORTER_HEALTH_RECORD, m.value()) for m in consume(hcfg, hcfg.kafka.health_topic)]


def nfdump_exporters(files) -> dict[str, dict[tuple[str, int], dict]]:
    """`nfdump -E` of each file: the independent reading of nfcapd's exporter records
    (an exporter without flows in a file shows as "no flows sent")."""
    line = re.compile(r"IP:\s+(\S+), version: \d+, ID:\s+(\d+)(?:, Sequence failures: (\d+), packets: (\d+), flows: (\d+))?")
    out = {}
    for f in files:
        out[f.name] = {(m[1], int(m[2])): {"sequence_failures": int(m[3] or 0), "datagrams": int(m[4] or 0),
                                          "flows": int(m[5] or 0)}
                       for m in line.finditer(run(["nfdump", "-E", str(f)]).stdout)}
    return out


def test_health_rows_in_kafka_count_exactly_what_was_sent(hcfg, exported, shipped):
    rows = health_rows(hcfg)
    ref_files = nfdump_exporters(shipped)
    per_file = defaultdict(list)
    for r in rows:
        per_file[r["source_file"]].append((r["exporter"], r["observation_domain"]))
    # exactly once: one row per exporter nfcapd listed in each file (the SIGKILLed attempt's
    # rows were aborted); a file nfcapd closed before the first datagram has none
    assert {f: sorted(v) for f, v in per_file.items()} == {f: sorted(v) for f, v in ref_files.items() if v}
    committed = len(decode(consume(hcfg, hcfg.kafka.flows_topic)))  # flows, whatever the wire format
    assert committed == sum(r.flows for r in exported)
    assert len(decode(consume(hcfg, hcfg.kafka.flows_topic, "read_uncommitted"))) > committed, \
        "the killed attempt's records are in the log, hidden by its aborted transaction"
    by = rows_by_exporter(rows)
    ref = defaultdict(lambda: defaultdict(int))
    for stats in ref_files.values():
        for key, st in stats.items():
            for k, v in st.items():
                ref[key][k] += v
    for r in exported:
        mine = by[(r.address, r.domain)]
        assert {x["version"] for x in mine} == {r.version}
        got = {k: sum(x[k] for x in mine) for k in ("flows", "packets", "bytes", "datagrams", "sequence_failures")}
        assert got == {"flows": r.flows, "packets": r.packets, "bytes": r.bytes, "datagrams": r.datagrams,
                       "sequence_failures": r.gaps}, (r.address, got)
        assert {k: got[k] for k in ref[(r.address, r.domain)]} == dict(ref[(r.address, r.domain)])  # nfdump -E
        with_flows = [x for x in mine if x["flows"]]
        assert all(x["templates"] == 1 and x["template_layouts"].startswith(f"v{r.version}:") for x in with_flows)
        assert {x["sampling_rates"] for x in with_flows} == {str(r.rate)}
        for x in mine:  # rates are the interval's counts over its length
            secs = max((x["interval_end"] - x["interval_start"]).total_seconds(), 1)
            assert x["flows_per_s"] == pytest.approx(x["flows"] / secs)
            assert x["bytes_per_s"] == pytest.approx(x["bytes"] / secs)
        # a row with flows was seen in its own interval (2 s < silent_after): never silent
        assert not any(x["silent"] for x in with_flows)
    a, b, c = (by[(r.address, r.domain)] for r in exported)
    assert all("1:10" in x["sampler_rates"] for x in c), "C's sampler (nfcapd's v5 default sampler) in every file"
    # clock skew: A's and C's flows end as they are sent; B's clock runs 120 s ahead
    for x in a + [y for y in c if y["flows"]]:
        assert -5_000 <= x["clock_skew_ms"] <= 1_000, x
    for x in (y for y in b if y["flows"]):
        assert SKEW_B_MS - 10_000 <= x["clock_skew_ms"] <= SKEW_B_MS + 1_000, x
    # C stopped: its later rows have no flows, carry its last arrival, and turn silent
    # exactly when interval_end - last_seen reaches silent_after_seconds
    last_c = max(x["last_seen"] for x in c if x["flows"])
    quiet = [x for x in c if not x["flows"]]
    assert quiet and all(x["last_seen"] == last_c for x in quiet)
    for x in quiet:
        assert x["silent"] == ((x["interval_end"] - last_c).total_seconds() >= SILENT_AFTER), x
    assert any(x["silent"] for x in quiet), "C was never flagged silent"
    assert abs(last_c.timestamp() * 1000 - exported[2].last_sent_ms) < 2_000


def test_status_json_and_table_show_each_exporter(hcfg, exported, shipped):
    st = json.loads(flowlake(hcfg, "status", "--json").stdout)["exporters"]
    assert st["silent_after_seconds"] == SILENT_AFTER
    by = {(e["exporter"], e["observation_domain"]): e for e in st["exporters"]}
    assert set(by) == {(r.address, r.domain) for r in exported}
    for r in exported:
        e = by[(r.address, r.domain)]
        assert (e["flows_total"], e["bytes_total"], e["datagrams_total"], e["sequence_failures_total"]) == \
            (r.flows, r.bytes, r.datagrams, r.gaps), e
        assert e["files"] == sum((r.address, r.domain) in v for v in nfdump_exporters(shipped).values())
        assert e["silent"] == (e["seconds_since_last_flow"] >= SILENT_AFTER)
        assert e["templates"] in (0, 1) and e["version"] == r.version
    c = by[(exported[2].address, exported[2].domain)]
    assert c["silent"] and c["sampler_rates"] == "-1=1:10" and c["flows_per_s"] == 0
    assert st["silent"] == sum(e["silent"] for e in st["exporters"]) >= 1
    # the same stack with a long silence threshold: nobody silent
    calm = json.loads(flowlake(hcfg, "status", "--json", FLOWLAKE_HEALTH_SILENT_AFTER_SECONDS="3600").stdout)
    assert not any(e["silent"] for e in calm["exporters"]["exporters"])
    table = flowlake(hcfg, "status").stdout
    assert "127.0.0.23" in table and "SILENT" in table and "health.silent_after_seconds" in table


def test_ingest_keeps_the_history_in_the_lake(hcfg, exported, shipped, spark):
    import duckdb

    from flowlake.pipelines import ingest

    ingest.run(hcfg, once=True)
    con = duckdb.connect()
    got = con.execute(
        f"select exporter, observation_domain, count(*), sum(flows), sum(bytes), sum(sequence_failures), "
        f"count(distinct source_file), min(date) from {lake_sql.source(hcfg.lake, 'exporter_health')} "
        "group by all order by all").fetchall()
    listed = nfdump_exporters(shipped)  # rows: one per exporter and file that lists it
    files = {(r.address, r.domain): sum((r.address, r.domain) in v for v in listed.values()) for r in exported}
    assert [g[:7] for g in got] == sorted(
        (r.address, r.domain, files[(r.address, r.domain)], r.flows, r.bytes, r.gaps, files[(r.address, r.domain)])
        for r in exported)
    assert ingest.counts(hcfg)["exporter_health"] == {"rows": sum(files.values()), "quarantined": 0}
    # the flows themselves landed too, as many as the health rows say
    flows = con.execute(f"select exporter, count(*) from {lake_sql.source(hcfg.lake)} group by all").fetchall()
    assert sorted(flows) == sorted((r.address, r.flows) for r in exported)
