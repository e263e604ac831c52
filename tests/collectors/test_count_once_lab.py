"""Issue 34's lab proof: one flow, counted once, through a chain of two real routers.

Network namespaces client - R1 - R2 - server, forwarding in R1 and R2. Both routers export
with softflowd on each of their two interfaces (so every packet is reported at four points:
R1 in and out, R2 in and out), IPFIX into the private stack's nfcapd (`flowlake up`) from
an export address of each capture's own (relay.py, as the lab's export does); the shipper,
Kafka and the ingest land the flows in the lake, where the static [exporters] tables name
the routers' interfaces and two [[enrich.interface_rules]] classify them: R1's interface 1
(towards the client, "Transit: lab") is the site's external boundary, every other one is
internal. iperf3 moves a known number of bytes from the client to the server.

`flowlake query --count-at boundary` and `--count-at key` must each count the transfer's
payload as iperf3 reports it within 1 %, and `--count-at all` four times it: the factor is
the number of observation points (2 routers x 2 interfaces). softflowd exports no
flowDirection and reports a record's interface as both its input and its output, so R1's
records on its external interface enter and leave on it: the rule counts them once anyway.

Why an export address per capture, not per router: without flowDirection every record reads
as ingress, and an observation point is (exporter, direction) (jobs/count_once.py: a flow's
records at one point all count, so a flow cut by the active timeout stays whole). Two
softflowd of one router exporting from one address would be one point, and `key` would count
that router's two captures of the same packets, twice the transfer. A capture on an interface
sees the packets of both directions, which is what a router exporting ingress and egress on
that interface reports: each capture is its own observation point, as flowDirection would
make it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

import lake_sql
from flowlake.base.ports import private_env
from flowlake.collectors.lab.export import FILLER_FRAMES, softflowd_backlog
from flowlake.collectors.lab.netns import Namespaces, free_udp_port, in_ns, sh
from needs import require

pytestmark = [pytest.mark.integration, pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]  # netns, a whole stack
FLOWLAKE = [sys.executable, "-m", "flowlake.cli"]
CLIENT, SERVER = "10.34.1.1", "10.34.3.2"
PORT = 5201
TRANSFER = 16 * 1024 * 1024  # iperf3 -n: bytes of payload
HEADERS = 20 + 32  # IPv4 + TCP with timestamps: what a flow's bytes hold beyond the payload, per packet
POINTS = 4  # observation points of every packet: R1 and R2, each on both interfaces


# the four captures: (router, interface index, interface name, description); R1's interface 1
# (towards the client) is the site's external boundary
CAPTURES = (("r1", 1, "to-client", "Transit: lab"), ("r1", 2, "to-r2", "core"),
            ("r2", 1, "to-r1", "core"), ("r2", 2, "to-server", "lan"))


def _export_addresses() -> list[str]:
    """An export address in 127/8 for each capture (CAPTURES' order), unique to this test process."""
    pid = os.getpid()
    return [f"127.{91 + i}.{(pid >> 8) & 255}.{pid & 255 or 1}" for i in range(len(CAPTURES))]


def _config(path: Path, addresses: list[str]) -> Path:
    text = ""
    for address, (router, index, name, description) in zip(addresses, CAPTURES, strict=True):
        text += f"""
[exporters."{address}"]
name = "lab-{router}-{name}"
snmp = false
[exporters."{address}".interfaces.{index}]
name = "{name}"
description = "{description}"
"""
    path.write_text(text + """
[[enrich.interface_rules]]
description = "^Transit"
boundary = "external"
[[enrich.interface_rules]]
boundary = "internal"
""")
    return path


def _dropped(ns: str, ctl: Path) -> int:
    res = sh(*in_ns(ns, "softflowctl", "-c", ctl, "statistics"), check=False, timeout=10)
    for line in res.stdout.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Packets dropped by libpcap" and value.split() and value.split()[0].isdigit():
            return int(value.split()[0])
    return 0


def _flush(ns: str, dev: str, ctl: Path, limit_s: float = 30.0) -> None:
    """Have softflowd read every packet it captured, then expire its flows: the capture ring
    hands packets over a block at a time, so non-IP filler frames (which softflowd ignores)
    push the transfer's last block through (as the lab's export does: collectors/lab/export.py)."""
    deadline, filled = time.time() + limit_s, 0
    while softflowd_backlog(ns, ctl) > filled and time.time() < deadline:
        sh(*in_ns(ns, sys.executable, "-m", "flowlake.collectors.lab.endpoint", "filler", dev, FILLER_FRAMES),
           check=False, timeout=20)
        filled += FILLER_FRAMES
        time.sleep(0.2)
    assert softflowd_backlog(ns, ctl) <= filled, \
        f"softflowd ({ctl.name}) did not read the transfer's packets in {limit_s:g} s"
    assert _dropped(ns, ctl) == 0, f"softflowd ({ctl.name}) lost packets: the proof would not hold"
    sh(*in_ns(ns, "softflowctl", "-c", ctl, "expire-all"), check=False, timeout=10)


@pytest.fixture(scope="module")
def border_lab(tmp_path_factory):
    require("netns", why="the count-once lab (client - R1 - R2 - server)")
    home = tmp_path_factory.mktemp("count-once-lab")
    addresses = _export_addresses()
    env = {**os.environ, **private_env(home), "TZ": "UTC",
           "FLOWLAKE_CONFIG": str(_config(home / "lab.toml", addresses))}
    up = subprocess.run([*FLOWLAKE, "up", "--no-superset"], env=env, capture_output=True, text=True, timeout=400)
    lab = Namespaces(prefix="fl-co")
    try:
        assert up.returncode == 0, f"flowlake up failed:\n{up.stdout}\n{up.stderr}"
        c, r1, r2, s = (lab.add(role) for role in ("c", "r1", "r2", "s"))
        c_r1, r1_c = lab.link(c, r1, CLIENT, "10.34.1.2")
        r1_r2, r2_r1 = lab.link(r1, r2, "10.34.2.1", "10.34.2.2")
        r2_s, s_r2 = lab.link(r2, s, "10.34.3.1", SERVER)
        sh(*in_ns(c, "ip", "route", "add", "default", "via", "10.34.1.2"))
        sh(*in_ns(s, "ip", "route", "add", "default", "via", "10.34.3.1"))
        sh(*in_ns(r1, "ip", "route", "add", "10.34.3.0/24", "via", "10.34.2.2"))
        sh(*in_ns(r2, "ip", "route", "add", "10.34.1.0/24", "via", "10.34.2.1"))
        for ns in (r1, r2):
            sh(*in_ns(ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"))
        target = f"127.0.0.1:{env['FLOWLAKE_COLLECTOR_PORT']}"
        ctls = []
        devs = {("r1", 1): r1_c, ("r1", 2): r1_r2, ("r2", 1): r2_r1, ("r2", 2): r2_s}
        for address, (router, index, _, _) in zip(addresses, CAPTURES, strict=True):
            ns, dev = {"r1": r1, "r2": r2}[router], devs[(router, index)]
            port = free_udp_port()
            relay = lab.adopt(subprocess.Popen(
                [sys.executable, "-m", "flowlake.collectors.lab.relay", "--netns", ns, "--port", str(port),
                 "--to", target, "--source", address], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            assert "ready" in relay.stdout.readline(), relay.stderr.read()
            ctl = home / f"softflowd-{dev}.ctl"
            p = lab.spawn(ns, "softflowd", "-i", f"{index}:{dev}", "-n", f"127.0.0.1:{port}", "-v", 10,
                          "-A", "milli", "-d", "-c", ctl, "-p", home / f"softflowd-{dev}.pid",
                          "-t", "maxlife=3600", "-t", "expint=1")
            time.sleep(0.3)
            assert p.poll() is None, f"softflowd on {dev} exited: {p.stderr.read()}"
            ctls.append((ns, dev, ctl))
        server = lab.spawn(s, "iperf3", "-s", "-1", "-B", SERVER, "-p", PORT)
        time.sleep(1)
        # paced (16 Mbit/s, ~8 s): four softflowd on a shared 2-core box read every packet (at 40 Mbit/s
        # beside a whole suite, at idle CPU priority, libpcap dropped a few)
        client = sh(*in_ns(c, "iperf3", "-c", SERVER, "-p", PORT, "-n", TRANSFER, "-b", "16M", "-J"), timeout=120)
        sent = json.loads(client.stdout)["end"]["sum_sent"]["bytes"]
        lab.stop(server)
        for ns, dev, ctl in ctls:
            _flush(ns, dev, ctl)
        time.sleep(1)  # the relays pass the last exports on
        yield {"env": env, "home": home, "sent": sent, "exporters": addresses}
    finally:
        lab.close()
        subprocess.run([*FLOWLAKE, "down"], env=env, capture_output=True, timeout=300)


def _landed(lab: dict, timeout: float = 120.0) -> list[tuple]:
    """The transfer's observations in the lake, per exporter and interface, once all four
    points have landed their share (the last export may trail the first by seconds)."""
    lake = lab["home"] / "lake"
    deadline = time.time() + timeout
    rows: list[tuple] = []
    while time.time() < deadline:
        if lake_sql.files(lake, "flows"):  # listed anew on every try: the ingest keeps adding files
            rows = duckdb.connect().execute(f"""
                SELECT exporter, input_if, sum(bytes), sum(packets), count(*)
                FROM {lake_sql.source(lake, "flows")}
                WHERE src_addr = '{CLIENT}' AND dst_addr = '{SERVER}' AND dst_port = {PORT}
                GROUP BY ALL ORDER BY ALL""").fetchall()
            if len(rows) == POINTS and all(r[2] >= lab["sent"] for r in rows):
                return rows
        time.sleep(2)
    raise AssertionError(f"waited {timeout:g} s for the transfer's flows at {POINTS} points "
                         f"(each >= {lab['sent']} bytes); the lake had: {rows}")


def _query(lab: dict, rule: str) -> tuple[int, int, str]:
    """(bytes, packets) of the transfer's client -> server records as `flowlake query
    --count-at rule` counts them, and the rule line it printed on stderr."""
    res = subprocess.run([*FLOWLAKE, "query", f"src host {CLIENT} and dst host {SERVER} and dst port {PORT}",
                          "--count-at", rule, "--format", "json", "--limit", "0"],
                         env=lab["env"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    records = json.loads(res.stdout)
    return sum(r["bytes"] for r in records), sum(r["packets"] for r in records), res.stderr


def test_each_rule_counts_the_transfer_once_and_all_counts_every_point(border_lab, figure):
    landed = _landed(border_lab)
    want = {(address, index) for address, (_, index, _, _) in zip(border_lab["exporters"], CAPTURES, strict=True)}
    assert {(e, i) for e, i, *_ in landed} == want, landed
    sent = border_lab["sent"]
    counted = {}
    for rule in ("boundary", "key", "all"):
        nbytes, packets, said = _query(border_lab, rule)
        assert f"--count-at = {rule}" in said, said
        counted[rule] = (nbytes, packets)
    # a point that sees segmentation offload's large packets has fewer headers than one that
    # sees wire-sized ones: compare payloads (layer-3 bytes less one IPv4+TCP header a packet)
    payload = {rule: nbytes - HEADERS * packets for rule, (nbytes, packets) in counted.items()}
    for rule in ("boundary", "key"):
        assert payload[rule] == pytest.approx(sent, rel=0.01), (
            f"--count-at {rule}: {payload[rule]} bytes of payload ({counted[rule][0]} at layer 3, "
            f"{counted[rule][1]} packets) against iperf3's {sent}")
    factor = payload["all"] / payload["boundary"]
    figure(f"count-once lab: iperf3 sent {sent:,} B; payload counted: boundary {payload['boundary']:,}, "
           f"key {payload['key']:,}, all {payload['all']:,} ({factor:.3f}x, {POINTS} observation points)")
    assert factor == pytest.approx(POINTS, rel=0.01), (
        f"--count-at all counted {factor:.3f}x the transfer; the lab has {POINTS} observation points "
        "(R1 and R2, each exporting on both interfaces)")
