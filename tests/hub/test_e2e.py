"""The walking skeleton, end to end, as a user runs it: `flowlake up` starts a private
stack (Kafka, ingest, shipper, nfcapd); real NetFlow from softflowd (v9 and IPFIX) and
nfreplay reaches nfcapd; the lake ends up holding exactly the flows nfdump counts in the
collected files, across SIGKILLs of the shipper and the ingest, with bad input quarantined."""
from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import lake_sql  # noqa: E402
import pcapgen  # noqa: E402
import sflow_agent  # noqa: E402
from flowlake.base.ports import free_port, private_env  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
FLOWLAKE = [sys.executable, "-m", "flowlake.cli"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    home = tmp_path_factory.mktemp("e2e-home")
    env = {**os.environ, **private_env(home), "TZ": "UTC",
           # SNMP for every exporter that sends flows, at an agent that never answers (nothing
           # listens on the port): the poller runs as a service, the flows land all the same
           "FLOWLAKE_SNMP_POLL_SEEN": "true", "FLOWLAKE_SNMP_PORT": str(free_port(socket.SOCK_DGRAM)),
           "FLOWLAKE_SNMP_TIMEOUT_SECONDS": "0.5", "FLOWLAKE_SNMP_RETRIES": "0"}
    up = subprocess.run([*FLOWLAKE, "up", "--no-superset"], env=env, capture_output=True, text=True, timeout=400)
    try:
        assert up.returncode == 0, f"flowlake up failed:\n{up.stdout}\n{up.stderr}"
        yield {"env": env, "home": home, "port": int(env["FLOWLAKE_COLLECTOR_PORT"])}
    finally:
        subprocess.run([*FLOWLAKE, "down"], env=env, capture_output=True, timeout=300)


def status(stack) -> dict:
    res = subprocess.run([*FLOWLAKE, "status", "--json"], env=stack["env"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def closed_files(stack) -> list[Path]:
    spool = stack["home"] / "nfcapd"
    return sorted(p for p in spool.rglob("nfcapd.*") if ".current." not in p.name)


def nfdump_totals(files: list[Path]) -> dict:
    """nfdump's own statistics over the collected files: the reference."""
    tot = {"flows": 0, "packets": 0, "bytes": 0}
    for f in files:
        res = subprocess.run(["nfdump", "-r", str(f), "-I"], capture_output=True, text=True)
        if res.returncode != 0:
            continue  # a corrupt file: not data nfdump can count
        for line in res.stdout.splitlines():
            key, _, val = line.partition(":")
            if key in ("Flows", "Packets", "Bytes"):
                tot[key.lower()] += int(val)
    return tot


def lake(stack, sql: str):
    """`sql` over the view `flows`: the Delta table lake/flows at its current version (its
    folders also hold files compaction replaced and uncommitted ones: never glob them)."""
    from flowlake.base import delta

    path = stack["home"] / "lake" / "flows"
    if not (path / "_delta_log").is_dir():
        return None
    con = duckdb.connect()
    try:
        delta.duckdb_load_delta(con)
        con.execute(f"create view flows as select * from delta_scan('{path}')")
        return con.execute(sql).fetchall()
    finally:
        con.close()


def lake_totals(stack) -> dict:
    rows = lake(stack, "select count(*), coalesce(sum(packets),0), coalesce(sum(bytes),0) from flows")
    if rows is None:
        return {"flows": 0, "packets": 0, "bytes": 0}
    f, p, b = rows[0]
    return {"flows": f, "packets": int(p), "bytes": int(b)}


def wait_for_lake(stack, timeout: float = 240.0) -> dict:
    """Wait until nfcapd has rotated, the shipper has shipped and the lake equals nfdump."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        ref = nfdump_totals(closed_files(stack))
        got = lake_totals(stack)
        if ref == got and ref["flows"] > 0 and not list((stack["home"] / "nfcapd").rglob("nfcapd.current.*.pending")):
            time.sleep(3)  # stable?
            if nfdump_totals(closed_files(stack)) == lake_totals(stack) == ref:
                return ref
        last = (ref, got)
        time.sleep(2)
    raise AssertionError(f"lake never matched nfdump: nfdump {last[0]} lake {last[1]}")


def no_duplicates(stack):
    dup = lake(stack, "select source_file, file_seq, count(*) c from flows group by all having c > 1 limit 5")
    assert dup == [], f"flows doubled in the lake: {dup}"


def send_softflowd(stack, pcap: Path, version: int):
    subprocess.run(["softflowd", "-r", str(pcap), "-n", f"127.0.0.1:{stack['port']}", "-v", str(version), "-d", "-c", "none"],
                   check=True, capture_output=True, timeout=120)


def test_real_netflow_lands_exactly(stack, tmp_path):
    pcap = tmp_path / "a.pcap"
    # recent packets, as from a live router: nfreplay below re-exports them as v9, and
    # 32-bit uptimes cannot carry a year-old flow (it would land weeks ahead: quarantined)
    recent = time.time() - 3600
    pcapgen.write_pcap(pcap, 3000, seed=7, start=recent)
    send_softflowd(stack, pcap, 9)
    pcapgen.write_pcap(pcap, 2000, seed=8, ipv6_share=0.5, start=recent)
    send_softflowd(stack, pcap, 10)
    ref = wait_for_lake(stack)
    assert ref["flows"] >= 4500  # what nfcapd wrote (UDP loss on loopback is visible in status)
    no_duplicates(stack)

    # nfreplay of a collected file: v9 again, through the same collector
    first = next(f for f in closed_files(stack) if nfdump_totals([f])["flows"] > 0)
    subprocess.run(["nfreplay", "-r", str(first), "-H", "127.0.0.1", "-p", str(stack["port"]), "-v", "9"],
                   check=True, capture_output=True, timeout=120)
    ref2 = wait_for_lake(stack)
    assert ref2["flows"] > ref["flows"]
    no_duplicates(stack)

    # field by field against nfdump's own JSON output for one file
    sample = next(f for f in closed_files(stack) if nfdump_totals([f])["flows"] > 100)
    records = json.loads(subprocess.run(["nfdump", "-r", str(sample), "-o", "json"], capture_output=True,
                                        text=True, check=True, env={**os.environ, "TZ": "UTC"}).stdout)
    rel = str(sample.relative_to(stack["home"] / "nfcapd"))
    rows = lake(stack, f"select file_seq, src_addr, dst_addr, src_port, dst_port, proto, packets, bytes, exporter, "
                       f"epoch_ms(time_start), epoch_ms(time_end), input_if, output_if, tos "
                       f"from flows where source_file = '{rel}' order by file_seq")
    assert len(rows) == len(records)
    for row, rec in zip(rows, records):
        assert row[1] == rec.get("src4_addr", rec.get("src6_addr"))
        assert row[2] == rec.get("dst4_addr", rec.get("dst6_addr"))
        if rec["proto"] in (1, 58):  # ICMP: nfdump shows type/code, the lake dst_port = type*256+code
            assert (row[3], row[4], row[5]) == (0, rec["icmp_type"] * 256 + rec["icmp_code"], rec["proto"])
        else:
            assert (row[3], row[4], row[5]) == (rec["src_port"], rec["dst_port"], rec["proto"])
        assert (row[6], row[7]) == (rec["in_packets"], rec["in_bytes"])
        assert row[8] == rec.get("ip4_router", rec.get("ip6_router"))
        first = dt.datetime.fromisoformat(rec["first"]).replace(tzinfo=dt.timezone.utc)
        last = dt.datetime.fromisoformat(rec["last"]).replace(tzinfo=dt.timezone.utc)
        want = [int(first.timestamp() * 1000), int(last.timestamp() * 1000)]
        if want[1] > time.time() * 1000 + 3_600_000:  # softflowd's and nfreplay's uptimes wrapped: nfcapd put
            want = [t - (1 << 32) if t > time.time() * 1000 else t for t in want]  # them 2^32 ms ahead, moved back
        if -1000 <= want[1] - want[0] < 0:  # softflowd's IPFIX rounding: an end 1 ms before the start
            want[0] = want[1]
        assert [row[9], row[10]] == want
        assert recent * 1000 - 1000 <= row[9] <= row[10] <= recent * 1000 + 600_000  # when the packets were
        assert (row[11], row[12], row[13]) == (rec["input_snmp"], rec["output_snmp"], rec["src_tos"])

    for _ in range(30):  # the shipper writes its state file every second or so
        st = status(stack)
        if st["counts"]["shipper"].get("flows_shipped") == ref2["flows"]:
            break
        time.sleep(1)
    assert all(st["components"][c]["state"] == "running" for c in ("kafka", "nfcapd", "shipper", "ingest"))
    # counts at every stage agree: nfcapd received >= written = shipped = in the lake
    assert st["counts"]["shipper"]["flows_shipped"] == ref2["flows"]
    assert st["counts"]["lake"]["flows"]["rows"] == ref2["flows"]
    assert st["counts"]["nfcapd"]["flows"] == ref2["flows"]
    assert st["counts"]["quarantined"]["kafka_messages"] == 0
    # exporter health travels in the same transactions: its lake rows count every flow once,
    # across the SIGKILLs (the ingest lands health.v1 in its own query: wait for it)
    health = stack["home"] / "lake" / "exporter_health"
    for _ in range(60):
        # the table's current files (a Delta table: never a glob, its log holds Parquet checkpoints)
        got = duckdb.connect().execute(f"select coalesce(sum(flows), 0) from {lake_sql.source(health.parent, health.name)}"
                                       ).fetchone()[0] if lake_sql.files(health.parent, health.name) else 0
        if got == ref2["flows"]:
            break
        time.sleep(2)
    assert got == ref2["flows"]
    assert {e["exporter"] for e in st["exporters"]["exporters"]} == {"127.0.0.1"}
    # the exporter's SNMP agent is unreachable: the flows above landed anyway, the enricher's
    # file holds no names for it, and status says why
    for _ in range(30):
        snmp = status(stack)["snmp"]
        if snmp["exporters"].get("127.0.0.1", {}).get("error"):
            break
        time.sleep(1)
    assert st["components"]["snmp"]["state"] == "running"
    assert "timeout" in snmp["exporters"]["127.0.0.1"]["error"] and snmp["errors"] == 1
    names = json.loads((stack["home"] / "state" / "snmp" / "interfaces.json").read_text())["exporters"]["127.0.0.1"]
    assert names["interfaces"] == {} and names["sys_name"] == "" and "timeout" in names["error"]
    # ... and the flows in the lake carry explicit unknowns for the names, never a guess
    named = lake(stack, "select count(*) from flows where exporter_name <> '' or in_if_name <> '' or out_if_name <> ''"
                        " or in_if_description <> '' or in_if_speed <> 0")[0][0]
    assert named == 0
    assert lake(stack, "select count(*) from flows where in_if_name = '' and exporter_name = ''")[0][0] == ref2["flows"]


def _kill(stack, name: str):
    st = status(stack)
    pid = st["components"][name]["pid"]
    assert pid, f"{name} is not running"
    os.killpg(pid, signal.SIGKILL)
    for _ in range(50):
        if status(stack)["components"][name]["state"] != "running":
            return
        time.sleep(0.2)
    raise AssertionError(f"{name} survived SIGKILL")


def _up(stack):
    res = subprocess.run([*FLOWLAKE, "up", "--no-superset"], env=stack["env"], capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr


def test_metrics_endpoint_serves_the_status_figures(stack):
    """`flowlake up` starts the metrics component; /metrics says what `flowlake status` says."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    wait_for_lake(stack)
    st = status(stack)
    assert st["components"]["metrics"]["state"] == "running"
    url = f"http://127.0.0.1:{stack['env']['FLOWLAKE_METRICS_PORT']}/metrics"
    with urllib.request.urlopen(url, timeout=60) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    fam = {f.name: f for f in text_string_to_metric_families(text)}
    up = {s.labels["component"]: s.value for s in fam["flowlake_component_up"].samples}
    assert {c: up[c] for c in ("kafka", "nfcapd", "shipper", "ingest", "metrics")} == dict.fromkeys(
        ("kafka", "nfcapd", "shipper", "ingest", "metrics"), 1.0)
    assert {c for c, v in up.items() if v} == {c for c, s in st["components"].items() if s["state"] == "running"}
    stages = {s.labels["stage"]: s.value for s in fam["flowlake_stage_flows"].samples}
    assert stages["lake"] == st["counts"]["lake"]["flows"]["rows"] > 0
    assert stages["shipped"] == st["counts"]["shipper"]["flows_shipped"]
    assert stages["nfcapd_received"] == st["counts"]["nfcapd"]["flows"]


@pytest.mark.parametrize("victim, delay", [("shipper", 1.0), ("ingest", 4.0)])
def test_sigkill_mid_work_loses_and_doubles_nothing(stack, tmp_path, victim, delay):
    before = wait_for_lake(stack)
    pcap = tmp_path / "big.pcap"
    pcapgen.write_pcap(pcap, 60000, seed=11 if victim == "shipper" else 12)
    send_softflowd(stack, pcap, 9)
    time.sleep(delay)  # nfcapd rotates every 2 s; the shipper/ingest is now busy with it
    _kill(stack, victim)
    time.sleep(2)
    _up(stack)  # restarts just the dead component
    after = wait_for_lake(stack, timeout=300)
    assert after["flows"] > before["flows"] + 30000
    no_duplicates(stack)


def test_bad_input_is_quarantined_and_the_rest_flows(stack, tmp_path):
    from confluent_kafka import Producer

    spool = stack["home"] / "nfcapd"
    good = next(f for f in closed_files(stack) if nfdump_totals([f])["flows"] > 100)
    (spool / "nfcapd.20200101000000").write_bytes(os.urandom(4096))  # garbage
    (spool / "nfcapd.20200101000010").write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # truncated
    bootstrap = f"127.0.0.1:{stack['env']['FLOWLAKE_KAFKA_PORT']}"
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce("flows.v1", b"\x00garbage that is no Avro")
    assert p.flush(30) == 0
    pcap = tmp_path / "after.pcap"
    pcapgen.write_pcap(pcap, 500, seed=13)
    send_softflowd(stack, pcap, 10)
    qdir = stack["home"] / "lake" / "quarantine" / "nfcapd"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(qdir.glob("*.reason"))) < 2:
        time.sleep(1)
    reasons = {p.name: p.read_text() for p in qdir.glob("*.reason")}
    assert len(reasons) == 2, reasons
    assert all("nfcapd.2020010100" in name for name in reasons)
    wait_for_lake(stack)  # everything else still arrives, exactly
    no_duplicates(stack)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st = status(stack)
        if st["counts"]["quarantined"]["kafka_messages"] >= 1:
            break
        time.sleep(2)
    assert st["counts"]["quarantined"]["kafka_messages"] == 1
    assert st["counts"]["quarantined"]["nfcapd_files"] == 2


def test_sampled_routers_land_scaled_per_sampler_and_unknown_rates_show(stack):
    """Sampled routers through `flowlake up`'s stack (nfcapd + sampling tap + shipper +
    Kafka + ingest): lake totals per exporter and rate equal the model's truth (wire
    counts x the rate in force at export, two samplers each, one rate changed mid-run);
    a router naming a sampler it never announced lands with sampling_rate 0 and is
    counted in `flowlake status --json`."""
    from flowlake.collectors.traffic import api, model
    from flowlake.collectors.traffic.sampling import Sampler, SamplingPlan

    start = dt.datetime(2026, 11, 21, 6, tzinfo=dt.timezone.utc)
    t0 = int(start.timestamp() * 1000)
    forms = [("ipfix-302-309-310", True), ("ipfix-data-311", True), ("ipfix-48-34", False)]
    p = api.params_for("ipfix")
    p.bulk, p.scanners, p.fanin, p.teleimmersion = [], [], [], []
    p.routers = [model.Router(form, f"127.0.0.{90 + i}", 1.0, sampling=SamplingPlan(
        form, [Sampler(1, 1000), Sampler(2, 250)], change_at_ms=t0 + 300_000, change_sampler=1, change_rate=500,
        announce=announce)) for i, (form, announce) in enumerate(forms)]
    # 5,000 flows/s: the test is about rates per sampler, not burst capacity (at 50,000/s, on the
    # two-worker suite's loaded box, datagrams and sampler options were lost in socket buffers)
    doc = api.generate_day(("127.0.0.1", stack["port"]), start, 600, 1500, "ipfix", params=p, seed=11, max_rate=5_000)
    want = {}
    for e in doc["exporters"]:
        for rate, v in e["by_rate"].items():
            want[(e["address"], int(rate))] = (v["flows"], v["lake_packets"], v["lake_bytes"])
    addrs = ", ".join(f"'{e['address']}'" for e in doc["exporters"])
    deadline = time.monotonic() + 240
    got = {}
    while time.monotonic() < deadline:
        rows = lake(stack, f"select exporter, sampling_rate, count(*), sum(packets), sum(bytes) from flows "
                           f"where exporter in ({addrs}) group by all") or []
        got = {(r[0], r[1]): (r[2], int(r[3]), int(r[4])) for r in rows}
        if got == want:
            break
        time.sleep(2)
    assert got == want
    assert {r for _, r in want} >= {1000, 250, 500, 0}
    no_duplicates(stack)
    unknown = next(e for e in doc["exporters"] if e["sampling_form"] == "ipfix-48-34")
    for _ in range(30):
        st = status(stack)["sampling"]
        if st["exporters"].get(unknown["address"], {}).get("unknown_rate_flows") == unknown["flows"]:
            break
        time.sleep(1)
    assert st["exporters"][unknown["address"]]["unknown_rate_flows"] == unknown["flows"]
    known = doc["exporters"][0]
    assert st["exporters"][known["address"]]["unknown_rate_flows"] == 0
    assert st["exporters"][known["address"]]["samplers"] == {
        "domain 1 sampler 1": {"rate": 1000, "form": "options samplingSize 309 / samplingPopulation 310"},
        "domain 1 sampler 2": {"rate": 500, "form": "options samplingSize 309 / samplingPopulation 310"}}
    res = subprocess.run([*FLOWLAKE, "status"], env=stack["env"], capture_output=True, text=True, timeout=60)
    assert "sampling per exporter" in res.stdout and "unknown sampling rate" in res.stdout

    # a broken v9 router (First after Last in every 4th record): those flows are quarantined
    # with the reason, counted per exporter; the others land
    p.routers = [model.Router("broken", "127.0.0.95", 1.0, swap_times_every=4)]
    doc = api.generate_day(("127.0.0.1", stack["port"]), start, 600, 400, "v9", params=p, seed=12, max_rate=50_000)
    bad = doc["exporters"][0]["swapped_times"]
    assert bad > 0
    qdir = stack["home"] / "lake" / "quarantine" / "flows"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        landed = lake(stack, "select count(*) from flows where exporter = '127.0.0.95'")[0][0]
        if landed == doc["totals"]["flows"] - bad:
            break
        time.sleep(2)
    assert landed == doc["totals"]["flows"] - bad
    rows = [json.loads(x) for q in qdir.glob("*.jsonl") for x in q.read_text().splitlines()]
    assert len([r for r in rows if r["exporter"] == "127.0.0.95"]) == bad
    assert all("First is after its Last" in r["reason"] for r in rows)
    for _ in range(30):
        times = status(stack)["sampling"]["times"]
        if sum(times["exporters"].get("127.0.0.95", {}).get("quarantined", {}).values()) == bad:
            break
        time.sleep(1)
    assert sum(times["exporters"]["127.0.0.95"]["quarantined"].values()) == bad
    assert times["quarantined_flows"] == bad


def test_sflow_agent_lands_with_its_address_layer3_bytes_and_rate(stack, tmp_path):
    """sFlow through `flowlake up`'s stack (sflow-tap + sfcapd + shipper + Kafka + ingest):
    pmacctd + sfprobe replay a pcap as agent 192.0.2.77 announcing 1:5 for every packet;
    every sample lands once with the agent address as exporter (sfcapd stores the UDP
    sender), layer-3 bytes x 5, and the tap counts the agent. Last in the module: the other
    tests compare the whole lake with nfdump's totals of nfcapd's files."""
    from scapy.all import IP, UDP, Dot1Q, Ether, IPv6, Raw, wrpcap  # noqa: PLC0415  (scapy: slow import)

    packets = [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.77.0.1", dst="10.77.0.2")
               / UDP(sport=1000 + i, dport=53) / Raw(b"a" * (10 * i)) for i in range(5)]
    packets.append(Ether(src="02:00:00:00:00:03", dst="02:00:00:00:00:04") / Dot1Q(vlan=42)
                   / IPv6(src="2001:db8:77::1", dst="2001:db8:77::2") / UDP(sport=5, dport=6) / Raw(b"b" * 300))
    pcap = tmp_path / "sflow.pcap"
    wrpcap(str(pcap), packets)
    port = int(stack["env"]["FLOWLAKE_COLLECTOR_SFLOW_PORT"])
    sflow_agent.replay(tmp_path / "pmacctd.conf", pcap, port, "192.0.2.77", 2, ext_rate=5)
    want = sorted((p[IP].src if IP in p else p[IPv6].src, 5, 5, 5 * len(p[IP] if IP in p else p[IPv6]),
                   42 if Dot1Q in p else 0) for p in packets)
    got = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        got = sorted(lake(stack, "select src_addr, sampling_rate, packets, bytes, src_vlan from flows "
                                 "where exporter = '192.0.2.77'") or [])
        if len(got) >= len(want):
            break
        time.sleep(2)
    assert [(a, r, int(p), int(b), v) for a, r, p, b, v in got] == want
    no_duplicates(stack)
    sf = json.loads((stack["home"] / "state" / "sampling" / "sflow.json").read_text())["agents"]["192.0.2.77/2"]
    assert sf["flow_samples"] == len(packets) and sf["lost"] == 0 and sf["rates"] == {"5": len(packets)}, sf
