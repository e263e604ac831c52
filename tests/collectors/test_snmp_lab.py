"""The SNMP poller against a real net-snmp agent serving a network-namespace lab.

Two namespaces joined by a veth pair (collectors/active/lab.Lab); `snmpd` runs inside the
first (`ip netns exec`), so it serves that namespace's real interfaces and counters; the
poller runs there too (`flowlake snmp poll|serve` under `ip netns exec`). The link is kept
quiet (no IPv6, permanent neighbour entries: no ARP or ND), so its counters move only with
the datagrams the test sends: the poller's deltas must equal those bytes exactly (+ 42 bytes
of UDP/IPv4/Ethernet headers each) and match net-snmp's own snmpget. Names, aliases and
speeds are compared with snmpbulkwalk and the kernel. Every namespace and process is
removed on every exit path (fixture finalisers).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from flowlake.base.ports import free_port
from flowlake.collectors.snmp.snmpd import Snmpd, V3User
from flowlake.impact_lab import Lab, _sh
from needs import require

pytestmark = [pytest.mark.integration, pytest.mark.root]  # network namespaces


@pytest.fixture(autouse=True, scope="module")
def _root_and_snmpd():
    require("netns", why="network namespaces for the SNMP lab")
    if not (shutil.which("snmpd") or Path("/usr/sbin/snmpd").exists()):
        pytest.fail("the SNMP lab needs snmpd (`make setup` installs it)", pytrace=False)

V3 = V3User("flowlake-v3", "auth-pass-1234", "priv-pass-5678")
ALIAS = "Transit: lab-peer"
HEADERS = 14 + 20 + 8  # Ethernet + IPv4 + UDP: veth counters count whole frames
IF_NAME, IF_HC_IN, IF_HC_OUT = "1.3.6.1.2.1.31.1.1.1.1", "1.3.6.1.2.1.31.1.1.1.6", "1.3.6.1.2.1.31.1.1.1.10"

RECEIVER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE (root): room for the whole burst
s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(10)
print("ready", flush=True)
want, got = int(sys.argv[3]), 0
try:
    while got < want:
        s.recv(65535); got += 1
except socket.timeout:
    pass
print("got", got, flush=True)
"""
SENDER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(int(sys.argv[3])):
    s.sendto(b"x" * int(sys.argv[4]), (sys.argv[1], int(sys.argv[2])))
"""


def _ifindex(ns: str, dev: str) -> int:
    return int(_sh("ip", "-n", ns, "-o", "link", "show", dev).stdout.split(":")[0])


def _mac(ns: str, dev: str) -> str:
    return json.loads(_sh("ip", "-n", ns, "-j", "link", "show", dev).stdout)[0]["address"]


class SnmpLab:
    def __init__(self, root: Path):
        self.root = root
        self.home = root / "home"
        self.lab = Lab(None)
        self.agent: Snmpd | None = None

    def build(self):
        lab = self.lab
        lab.build()
        # a quiet link: no IPv6 (no router/neighbour solicitations), static neighbours (no ARP)
        for ns in (lab.ns_a, lab.ns_b):
            _sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
        _sh("ip", "-n", lab.ns_a, "neigh", "replace", lab.addr_b, "lladdr", _mac(lab.ns_b, lab.veth_b),
            "dev", lab.veth_a, "nud", "permanent")
        _sh("ip", "-n", lab.ns_b, "neigh", "replace", lab.addr_a, "lladdr", _mac(lab.ns_a, lab.veth_a),
            "dev", lab.veth_b, "nud", "permanent")
        self.ifindex = _ifindex(lab.ns_a, lab.veth_a)
        self.agent = Snmpd(self.root / "snmpd", address="127.0.0.1", community="lab-ro", rw_community="lab-rw",
                           sys_name="border-lab", users=[V3], netns=lab.ns_a, if_cache_seconds=0).start()
        self.agent.set_alias(self.ifindex, ALIAS)
        self.exporter = lab.addr_a  # as a router exporting from its link address would appear in the flows
        self.dead_port = free_port(socket.SOCK_DGRAM)
        self.config = self.root / "flowlake.toml"
        self.config.write_text(f"""
home = "{self.home}"
[snmp]
community = "lab-ro"
port = {self.agent.port}
timeout_seconds = 1.0
retries = 0
poll_interval_seconds = 3600
refresh_interval_seconds = 3600
[exporters."{self.exporter}"]
snmp_agent = "127.0.0.1"
[exporters."192.0.2.33"]            # the same agent by SNMPv3 authPriv
snmp_agent = "127.0.0.1"
snmp_version = "3"
snmp_user = "{V3.name}"
snmp_auth_password = "{V3.auth_password}"
snmp_priv_password = "{V3.priv_password}"
[exporters."192.0.2.34"]            # wrong community: the agent stays silent
snmp_agent = "127.0.0.1"
snmp_community = "not-the-community"
[exporters."192.0.2.35"]            # nothing listens there
snmp_agent = "127.0.0.1"
snmp_port = {self.dead_port}
[exporters."192.0.2.36"]            # SNMPv3 with a wrong password
snmp_agent = "127.0.0.1"
snmp_version = "3"
snmp_user = "{V3.name}"
snmp_auth_password = "wrong-pass-0000"
snmp_priv_password = "{V3.priv_password}"
[exporters."192.0.2.37"]
sampling = 100
snmp = false
""")
        self.env = {**os.environ, "FLOWLAKE_CONFIG": str(self.config), "FLOWLAKE_HOME": str(self.home)}
        return self

    def flowlake(self, *args, ns: str | None = None, check=True) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "flowlake.cli", *args]
        if ns:
            cmd = ["ip", "netns", "exec", ns, *cmd]
        res = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=120)
        if check and res.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
        return res

    def poll(self, *exporters) -> dict:
        args = [a for e in exporters for a in ("-e", e)]
        res = self.flowlake("snmp", "poll", "--json", *args, ns=self.lab.ns_a, check=False)
        return {"rc": res.returncode, **json.loads(res.stdout)}

    def interfaces(self) -> dict:
        path = self.home / "state" / "snmp" / "interfaces.json"
        return json.loads(path.read_text()) if path.exists() else {"exporters": {}}

    def counter_rows(self, exporter: str) -> list[list[dict]]:
        """Every poll's rows for one exporter, oldest first."""
        files = sorted((self.home / "lake" / "interface_counters").glob(f"date=*/{exporter}-*.parquet"),
                       key=lambda p: int(p.stem.rsplit("-", 1)[1]))
        return [pq.read_table(f).to_pylist() for f in files]

    def send(self, from_ns: str, to_addr: str, to_ns: str, count: int, size: int) -> None:
        port = 40000 + count
        rx = self.lab.spawn(to_ns, sys.executable, "-c", RECEIVER, to_addr, port, count, stdout=subprocess.PIPE)
        if rx.stdout.readline().strip() != "ready":
            raise AssertionError(f"receiver in {to_ns} did not start: {rx.stderr.read()}")
        _sh("ip", "netns", "exec", from_ns, sys.executable, "-c", SENDER, to_addr, port, count, size)
        out, _ = rx.communicate(timeout=30)
        assert f"got {count}" in out, f"receiver in {to_ns} saw: {out!r} (datagrams lost on a veth?)"

    def close(self):
        if self.agent is not None:
            self.agent.stop()
        self.lab.close()


@pytest.fixture(scope="module")
def snmplab(tmp_path_factory):
    lab = SnmpLab(tmp_path_factory.mktemp("snmp-lab"))
    try:
        yield lab.build()
    finally:
        lab.close()
        assert not [n for n in _sh("ip", "netns", "list").stdout.split() if n in (lab.lab.ns_a, lab.lab.ns_b)]


def test_names_speeds_and_states_match_snmpwalk_v2c_and_v3(snmplab, figure):
    res = snmplab.poll()
    assert res["rc"] == 1, "bad agents in the config: the poll must say so"
    took = {e: res["exporters"][e]["last_poll_seconds"] for e in (snmplab.exporter, "192.0.2.33")}
    figure(f"snmp: a fresh process's first poll (names + counters, {len(snmplab.agent.walk(IF_NAME))} interfaces) of net-snmp in the lab: "
           f"{took[snmplab.exporter]:.3f} s SNMPv2c, {took['192.0.2.33']:.3f} s SNMPv3 authPriv (with 4 bad agents "
           "timing out in the same round)")
    doc = snmplab.interfaces()
    assert doc["version"] == 1
    agent, lab = snmplab.agent, snmplab.lab
    ref_names = agent.walk(IF_NAME)
    ref = {int(i): {"name": n, "description": agent.walk("1.3.6.1.2.1.31.1.1.1.18").get(i, ""),
                    "speed_mbps": int(agent.walk("1.3.6.1.2.1.31.1.1.1.15")[i]),
                    "oper_status": int(agent.walk("1.3.6.1.2.1.2.2.1.8")[i])} for i, n in ref_names.items()}
    # the kernel's own view of the namespace: the agent serves the lab's real veth
    assert ref[snmplab.ifindex]["name"] == lab.veth_a and ref[1]["name"] == "lo"
    for exporter, user in ((snmplab.exporter, None), ("192.0.2.33", V3)):
        e = doc["exporters"][exporter]
        assert e["error"] == "" and e["sys_name"] == "border-lab" and e["polled"].endswith("Z")
        got = {int(i): v for i, v in e["interfaces"].items()}
        assert got == ref, exporter
        if user:  # the same answers through SNMPv3 authPriv with net-snmp's own tools
            assert agent.walk(IF_NAME, user=user) == ref_names
    veth = doc["exporters"][snmplab.exporter]["interfaces"][str(snmplab.ifindex)]
    assert veth == {"name": lab.veth_a, "description": ALIAS, "speed_mbps": 10000, "oper_status": 1}


def test_bad_agents_show_their_error_and_the_rest_is_polled(snmplab):
    doc = snmplab.interfaces()["exporters"]
    assert "192.0.2.37" not in doc, "snmp = false: never polled"
    assert doc["192.0.2.34"]["interfaces"] == {} and doc["192.0.2.34"]["sys_name"] == ""
    assert "timeout" in doc["192.0.2.34"]["error"] and "wrong community" in doc["192.0.2.34"]["error"]
    assert "timeout" in doc["192.0.2.35"]["error"] and str(snmplab.dead_port) in doc["192.0.2.35"]["error"]
    assert "authentication failed" in doc["192.0.2.36"]["error"]
    st = json.loads(snmplab.flowlake("status", "--json").stdout)["snmp"]
    assert st["errors"] == 3 and st["enabled"]
    assert st["exporters"]["192.0.2.34"]["error"] == doc["192.0.2.34"]["error"]
    assert st["exporters"][snmplab.exporter]["interfaces"] == len(doc[snmplab.exporter]["interfaces"])
    assert st["exporters"][snmplab.exporter]["error"] == ""
    table = snmplab.flowlake("status").stdout
    assert "SNMP poller" in table and "192.0.2.34" in table and "timeout" in table and "border-lab" in table


def test_counter_deltas_equal_the_bytes_sent_and_snmpget(snmplab):
    agent, lab, idx = snmplab.agent, snmplab.lab, snmplab.ifindex
    oids = (f"{IF_HC_IN}.{idx}", f"{IF_HC_OUT}.{idx}")

    def snmpget():
        lines = agent.get(*oids).stdout.split("\n")
        return [int(line.split()[1]) for line in lines if line.strip()]

    assert snmplab.poll(snmplab.exporter, "192.0.2.33")["rc"] == 0
    before = snmpget()
    n_in, size_in, n_out, size_out = 400, 1000, 250, 600
    snmplab.send(lab.ns_b, lab.addr_a, lab.ns_a, n_in, size_in)     # enters the veth in ns_a
    snmplab.send(lab.ns_a, lab.addr_b, lab.ns_b, n_out, size_out)   # leaves it
    after = snmpget()
    assert snmplab.poll(snmplab.exporter, "192.0.2.33")["rc"] == 0
    for exporter in (snmplab.exporter, "192.0.2.33"):
        polls = snmplab.counter_rows(exporter)
        row = {r["if_index"]: r for r in polls[-1]}[idx]
        prev = {r["if_index"]: r for r in polls[-2]}[idx]
        assert row["reset"] is False and row["interval_s"] > 0 and row["if_name"] == lab.veth_a
        assert row["speed_mbps"] == 10000
        assert row["in_octets"] == n_in * (size_in + HEADERS), exporter
        assert row["out_octets"] == n_out * (size_out + HEADERS), exporter
        assert row["in_ucast_pkts"] == n_in and row["out_ucast_pkts"] == n_out
        assert row["in_errors"] == row["in_discards"] == row["out_errors"] == row["out_discards"] == 0
        # net-snmp's own snmpget saw the same counters and the same movement
        assert [row["in_octets_counter"], row["out_octets_counter"]] == after
        assert [row["in_octets"], row["out_octets"]] == [a - b for a, b in zip(after, before)]
        assert row["in_octets_counter"] - prev["in_octets_counter"] == row["in_octets"]


def test_agent_restart_gives_null_deltas_then_continues(snmplab):
    agent = snmplab.agent
    agent.stop()
    agent.start()  # same port, same config: sysUpTime starts again from zero
    assert snmplab.poll(snmplab.exporter)["rc"] == 0
    row = {r["if_index"]: r for r in snmplab.counter_rows(snmplab.exporter)[-1]}[snmplab.ifindex]
    assert row["reset"] is True and row["in_octets"] is None and row["interval_s"] is None
    snmplab.send(snmplab.lab.ns_b, snmplab.lab.addr_a, snmplab.lab.ns_a, 50, 500)
    assert snmplab.poll(snmplab.exporter)["rc"] == 0
    row = {r["if_index"]: r for r in snmplab.counter_rows(snmplab.exporter)[-1]}[snmplab.ifindex]
    assert row["reset"] is False and row["in_octets"] == 50 * (500 + HEADERS)


def test_service_answers_refresh_requests(snmplab):
    """`flowlake snmp serve` (the service): polls at start, then an enricher's refresh
    request (an empty file named after the exporter) makes it poll that exporter again soon."""
    state = snmplab.home / "state" / "snmp"
    polled = snmplab.interfaces()["exporters"].get(snmplab.exporter, {}).get("polled", "")
    serve = snmplab.lab.spawn(snmplab.lab.ns_a, "env", f"FLOWLAKE_CONFIG={snmplab.config}",
                              f"FLOWLAKE_HOME={snmplab.home}", sys.executable, "-m", "flowlake.cli", "snmp", "serve")
    try:
        deadline = time.monotonic() + 60

        def wait(cond, what):
            while not cond():
                assert serve.poll() is None, f"snmp serve exited: {serve.stderr.read()}"
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                time.sleep(0.2)

        wait(lambda: snmplab.interfaces()["exporters"].get(snmplab.exporter, {}).get("polled", "") > polled,
             "the first round")
        first = snmplab.interfaces()["exporters"][snmplab.exporter]["polled"]
        (state / "refresh").mkdir(exist_ok=True)
        request = state / "refresh" / snmplab.exporter
        request.touch()
        unknown = state / "refresh" / "2001_db8__99"  # an exporter not polled (IPv6 ':' as '_')
        unknown.touch()
        wait(lambda: not request.exists(), "the refresh request to be taken")
        assert snmplab.interfaces()["exporters"][snmplab.exporter]["polled"] > first
        assert unknown.exists()
        st = json.loads(snmplab.flowlake("status", "--json").stdout)["snmp"]
        assert st["unknown_refresh"] == ["2001_db8__99"] and st["pending_refresh"] == []
    finally:
        snmplab.lab.stop(serve)
    assert serve.returncode == 0, serve.stderr.read()


def test_poller_service_is_supervised_like_the_others(tmp_path, monkeypatch):
    """What `flowlake up` / `down` do with the poller when an exporter has SNMP: a managed
    service with a pid file and log, idempotent start, a line in status, a clean stop.
    (An agent on loopback in this namespace: it serves this host's interfaces.)"""
    from flowlake import stack
    from flowlake.base import config
    from flowlake.base.ports import private_env
    from flowlake.collectors.snmp import service

    agent = Snmpd(tmp_path / "agent", address="127.0.0.2").start()
    cfg = None
    try:
        toml = tmp_path / "flowlake.toml"
        toml.write_text(f'[snmp]\nport = {agent.port}\n[exporters."127.0.0.2"]\nsnmp = true\n')
        for k, v in {**private_env(tmp_path / "home"), "FLOWLAKE_CONFIG": str(toml)}.items():
            monkeypatch.setenv(k, v)
        cfg = config.load()
        assert stack.component_state(cfg, "snmp")["state"] == "stopped"
        pid = service.start(cfg)
        assert pid and service.start(cfg) == pid, "a second start leaves the running poller alone"
        assert stack.component_state(cfg, "snmp")["state"] == "running"
        deadline = time.monotonic() + 30
        path = cfg.path("state", "snmp", "interfaces.json")
        while not (path.exists() and json.loads(path.read_text())["exporters"].get("127.0.0.2", {}).get("polled")):
            assert time.monotonic() < deadline, "the service never polled"
            time.sleep(0.2)
        names = {i["name"] for i in json.loads(path.read_text())["exporters"]["127.0.0.2"]["interfaces"].values()}
        assert "lo" in names and names == set(agent.walk(IF_NAME).values())
        st = stack.status_dict(cfg)
        assert st["components"]["snmp"]["state"] == "running"
        assert st["snmp"]["exporters"]["127.0.0.2"]["error"] == "" and st["snmp"]["errors"] == 0
    finally:
        if cfg is not None:
            service.stop(cfg)
        agent.stop()
    assert stack.component_state(cfg, "snmp")["state"] == "stopped"


def test_ipv6_agent_and_exporter(tmp_path):
    """An exporter known by an IPv6 address, its agent on ::1 (UDP over IPv6): names arrive
    under the exporter's address, and its refresh request file uses '_' for ':'."""
    from flowlake.base import config
    from flowlake.collectors.snmp import service, store

    agent = Snmpd(tmp_path / "agent6", address="::1").start()
    try:
        toml = tmp_path / "flowlake.toml"
        toml.write_text(f'home = "{tmp_path / "home"}"\n[snmp]\nport = {agent.port}\n'
                        f'[exporters."2001:db8::7"]\nsnmp_agent = "::1"\n')
        cfg = config.load(toml, env={})
        (store.refresh_dir(cfg)).mkdir(parents=True)
        (store.refresh_dir(cfg) / "2001_db8__7").touch()
        result = service.poll_once(cfg)
        assert result["exporters"]["2001:db8::7"]["error"] == ""
        doc = json.loads(store.interfaces_file(cfg).read_text())["exporters"]["2001:db8::7"]
        assert {i["name"] for i in doc["interfaces"].values()} == set(agent.walk(IF_NAME).values())
        assert not (store.refresh_dir(cfg) / "2001_db8__7").exists(), "the poll answered the request"
        assert list((cfg.lake / "interface_counters").glob("date=*/2001_db8__7-*.parquet"))
    finally:
        agent.stop()
