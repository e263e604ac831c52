"""Alerts (issue 24): the detectors on hand-made intervals and the lifecycle end to end
(open -> update -> resolve, dedup, ack and snooze through the CLI, a restart keeping the
state), stored in lake/alerts and sent to a sink at each transition. No services: the
engine runs in this process; `flowlake alerts` runs as the command a person types."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pytest

REPO = Path(__file__).resolve().parents[2]
FLOWLAKE = str(REPO / ".venv" / "bin" / "flowlake")
JSON_KEYS = {"id", "detector", "subject", "state", "severity", "started", "updated", "ended", "summary"}


def flows(rows: list[dict]) -> pa.Table:
    from flowlake.schemas import FLOW
    from flowlake.schemas.messages import arrow_schema

    base = {"exporter": "127.0.0.2", "input_if": 1, "output_if": 10, "src_port": 40000, "dst_port": 443,
            "proto": 6, "tcp_flags": 0x1B, "tos": 0, "packets": 10, "bytes": 5000, "sampling_rate": 1,
            "src_as": 0, "dst_as": 0, "source_file": "t", "file_seq": 0}
    out = []
    for r in rows:
        t = r["t"]
        out.append({**base, "time_start": t - 100, "time_end": t, **{k: v for k, v in r.items() if k != "t"}})
    return pa.Table.from_pylist(out, schema=arrow_schema(FLOW))


def scan(src: str, hosts: int, t: int, port: int = 22) -> list[dict]:
    return [{"src_addr": src, "dst_addr": f"10.9.{i // 250}.{i % 250 + 1}", "dst_port": port, "packets": 1,
             "bytes": 44, "tcp_flags": 2, "t": t} for i in range(hosts)]


def background(t: int, n: int = 40) -> list[dict]:
    return [{"src_addr": f"10.1.0.{i % 20 + 1}", "dst_addr": f"192.0.2.{i % 7 + 1}", "t": t} for i in range(n)]


class Recorder:
    """A sink as pipelines/alerts/notify.py's Notifier is called: submit(alert)."""

    def __init__(self):
        self.events: list[dict] = []

    def submit(self, alert: dict) -> None:
        self.events.append(alert)

    def of(self, subject: str) -> list[str]:
        return [e["event"] for e in self.events if e["subject"] == subject]


def cli(*args: str) -> str:
    res = subprocess.run([FLOWLAKE, "alerts", *args], capture_output=True, text=True, env=os.environ)
    assert res.returncode == 0, f"flowlake alerts {' '.join(args)}: {res.stdout}\n{res.stderr}"
    return res.stdout


def listed(*extra: str) -> dict[str, dict]:
    rows = json.loads(cli("list", "--json", *extra))
    assert all(set(r) == JSON_KEYS for r in rows), rows
    return {r["subject"]: r for r in rows}


@pytest.fixture
def engine_cfg(flowlake_home, monkeypatch):
    from flowlake.base import config

    monkeypatch.setenv("FLOWLAKE_ALERTS_RESOLVE_AFTER_SECONDS", "30")
    monkeypatch.setenv("FLOWLAKE_ALERTS_UPDATE_NOTIFY_SECONDS", "3600")
    config.reset()
    cfg = config.get()
    import shutil

    shutil.rmtree(cfg.lake / "alerts", ignore_errors=True)
    shutil.rmtree(cfg.path("state", "alerts"), ignore_errors=True)
    yield cfg
    config.reset()


def test_lifecycle_end_to_end(engine_cfg):
    from flowlake.pipelines.alerts.base import Interval
    from flowlake.pipelines.alerts.engine import Engine

    cfg, sink = engine_cfg, Recorder()
    now = int(time.time() * 1000)
    t = now - 600_000  # flow time: ten minutes ago, 10 s intervals

    def step(eng, rows):
        nonlocal t
        eng.process_interval(Interval(f"nfcapd.{t}", t, t + 10_000, flows(rows)))
        t += 10_000

    eng = Engine.from_config(cfg, sinks=[sink])
    step(eng, background(t))
    step(eng, background(t) + scan("203.0.113.5", 30, t))               # 30 hosts: 1.5x the threshold
    assert sink.of("203.0.113.5") == ["opened"]
    first = listed()["203.0.113.5"]
    assert (first["detector"], first["state"], first["severity"], first["ended"]) == ("scan", "open", "warning", None)
    assert "horizontal scan from 203.0.113.5: swept 30 hosts" in first["summary"]
    step(eng, background(t) + scan("203.0.113.5", 100, t, port=23))     # 130 in the window: critical
    assert sink.of("203.0.113.5") == ["opened", "updated"]              # severity rose: one update, same alert
    now_listed = listed()
    assert len(now_listed) == 1 and now_listed["203.0.113.5"]["id"] == first["id"]
    assert now_listed["203.0.113.5"]["severity"] == "critical" and now_listed["203.0.113.5"]["updated"] > first["updated"]

    # a person acknowledges it; the engine takes it at the next interval: its updates stay quiet
    assert f"acknowledged {first['id']}" in cli("ack", first["id"], "--by", "tester")
    step(eng, background(t) + scan("203.0.113.5", 120, t, port=25))
    assert listed()["203.0.113.5"]["state"] == "acknowledged"

    # restart: the open alert, its ack and the detectors' memory come back from the lake and state/
    eng.save()
    eng = Engine.from_config(cfg, sinks=[sink])
    assert list(eng.lifecycle.open) == [("scan", "203.0.113.5")]
    step(eng, background(t) + scan("203.0.113.5", 40, t, port=26))      # still the same alert (dedup)
    rows = eng.lifecycle.store.read()
    assert [r["id"] for r in rows] == [first["id"]] and rows[0]["intervals"] == 4 and rows[0]["acked_by"] == "tester"

    # a second scanner, snoozed: nothing of it is sent, not even when it comes back within the snooze
    step(eng, background(t) + scan("198.51.100.9", 25, t))
    other = listed()["198.51.100.9"]
    assert sink.of("198.51.100.9") == ["opened"]
    assert "snoozed" in cli("snooze", other["id"], "--for", "2h")
    for _ in range(4):                                                 # 40 s quiet > resolve_after 30 s
        step(eng, background(t))
    done = listed("--all")
    assert done["203.0.113.5"]["state"] == "resolved" and done["198.51.100.9"]["state"] == "resolved"
    assert done["203.0.113.5"]["ended"] > now_listed["203.0.113.5"]["updated"]  # the last interval it held
    assert sink.of("203.0.113.5") == ["opened", "updated", "resolved"]  # acked: its resolution is still sent
    assert sink.of("198.51.100.9") == ["opened"]                        # snoozed: no resolution sent
    assert listed() == {}                                                # `list` shows open ones only
    step(eng, background(t) + scan("198.51.100.9", 25, t))              # it comes back: a new alert, still snoozed
    again = listed()["198.51.100.9"]
    assert again["id"] != other["id"] and again["state"] == "snoozed" and sink.of("198.51.100.9") == ["opened"]
    ev = sink.events[0]
    assert set(ev) == JSON_KEYS | {"event"} and ev["event"] == "opened"

    shown = json.loads(cli("show", first["id"][:6], "--json"))
    assert shown["details"]["kind"] == "horizontal" and shown["acked_by"] == "tester"
    assert shown["resolved_at"] is not None and shown["intervals"] == 4
    res = subprocess.run([FLOWLAKE, "alerts", "ack", "ffffffffffff"], capture_output=True, text=True)
    assert res.returncode != 0 and "no alert 'ffffffffffff'" in res.stderr


def test_detectors_on_hand_made_intervals(engine_cfg, tmp_path):
    """Each detector on a few intervals whose answer is known by construction."""
    from flowlake.pipelines.alerts.base import Interval
    from flowlake.pipelines.alerts.blocklist import BlocklistDetector
    from flowlake.pipelines.alerts.fan_in import FanInDetector
    from flowlake.pipelines.alerts.scans import ScanDetector
    from flowlake.pipelines.alerts.silent import SilentDetector
    from flowlake.pipelines.alerts.talkers import NewTalkerDetector
    from flowlake.pipelines.alerts.volume import ExporterVolumeDetector, InterfaceSpeeds, InterfaceVolumeDetector
    from flowlake.pipelines.security_rules import FanInRule, ScanRule

    t0 = 1_764_000_000_000

    def iv(k, rows):
        return Interval(f"f{k}", t0 + k * 10_000, t0 + (k + 1) * 10_000, flows(rows))

    # scans: a vertical scan is found, spread over two intervals (the window adds up); a sampled
    # router's 1-packet records (x1000 in the lake) are probes too; a busy client is not a scan
    sd = ScanDetector(ScanRule(), window_seconds=60)
    vert = [{"src_addr": "203.0.113.6", "dst_addr": "10.0.0.1", "dst_port": p, "packets": 1000, "sampling_rate": 1000,
             "t": t0} for p in range(1, 13)]
    busy = [{"src_addr": "203.0.113.7", "dst_addr": f"10.0.0.{i}", "packets": 50, "t": t0} for i in range(1, 40)]
    assert sd.evaluate(iv(0, vert + busy)) == []                        # 12 ports: under 20
    got = sd.evaluate(iv(1, [{**r, "dst_port": r["dst_port"] + 12} for r in vert] + busy))
    assert [(f.subject, f.details["kind"], f.details["max_ports_per_destination"]) for f in got] == [("203.0.113.6", "vertical", 24)]

    # fan-in: a popular server keeps its crowd (its baseline), a quiet host drawing 200 sources is flagged
    fd = FanInDetector(FanInRule(), factor=10, min_pps=5, baseline_minutes=60, warmup_minutes=0.5, max_tracked=1000)
    popular = lambda t: [{"src_addr": f"198.18.0.{i}", "dst_addr": "10.0.0.80", "t": t} for i in range(1, 60)]  # noqa: E731
    quiet = lambda t: [{"src_addr": f"198.18.1.{i}", "dst_addr": f"10.0.2.{i}", "packets": 2, "bytes": 200, "t": t}  # noqa: E731
                       for i in range(1, 30)]
    for k in range(6):
        assert fd.evaluate(iv(k, popular(t0) + quiet(t0))) == []
    flood = [{"src_addr": f"198.19.{i // 200}.{i % 200}", "dst_addr": "10.0.2.1", "dst_port": 53, "proto": 17,
              "packets": 2, "bytes": 144, "t": t0} for i in range(200)]
    got = fd.evaluate(iv(6, popular(t0) + quiet(t0) + flood))
    assert [f.subject for f in got] == ["10.0.2.1"] and got[0].details["sources"] == 201
    assert got[0].details["top_port"] == 53 and got[0].severity == "critical"

    # interface and exporter volume: speeds from the SNMP poller's file win over the config
    snmp = tmp_path / "interfaces.json"
    snmp.write_text(json.dumps({"version": 1, "exporters": {"127.0.0.2": {"interfaces": {
        "1": {"name": "uplink", "speed_mbps": 1}}}}}))
    speeds = InterfaceSpeeds(snmp, {"127.0.0.2": {"interfaces": {"1": {"speed_mbps": 1000}, "10": {"speed_mbps": 100}}}},
                             ["*/11=1e9"])
    assert speeds.lookup("127.0.0.2", 1) == (1e6, "uplink") and speeds.lookup("127.0.0.2", 10) == (1e8, None)
    assert speeds.lookup("127.0.0.9", 11) == (1e9, None) and speeds.lookup("127.0.0.9", 12) is None
    vd = InterfaceVolumeDetector(speeds, share=0.9)
    heavy = [{"src_addr": "10.0.0.5", "dst_addr": "192.0.2.9", "bytes": 1_200_000, "t": t0}]  # 0.96 Mbit/s over 10 s
    got = vd.evaluate(iv(0, heavy))
    assert [(f.subject, f.severity) for f in got] == [("127.0.0.2/1/in", "warning")]
    assert "uplink" in got[0].summary and got[0].details["utilisation"] == pytest.approx(0.96)
    # a 5-minute flow ending now adds only its last 10 s: 30x less, under the threshold
    long_flow = [{**heavy[0], "bytes": 1_200_000 * 30}]
    long_tab = flows(long_flow)
    long_tab = long_tab.set_column(long_tab.schema.get_field_index("time_start"), "time_start",
                                   pa.array([t0 + 10_000 - 300_000], pa.timestamp("ms", tz="UTC")))
    assert [f.subject for f in vd.evaluate(Interval("f", t0, t0 + 10_000, long_tab))] == ["127.0.0.2/1/in"]
    assert ExporterVolumeDetector(1e6, 0).evaluate(iv(0, heavy)) == []
    assert [f.subject for f in ExporterVolumeDetector(5e5, 0).evaluate(iv(0, heavy))] == ["127.0.0.2"]

    # silent exporters: known ones only, after the threshold, forgotten after forget_after
    sil = SilentDetector(30, 3600)
    assert sil.evaluate(iv(0, background(t0 + 5_000) + [{"src_addr": "10.0.0.1", "dst_addr": "10.0.0.2",
                                                          "exporter": "127.0.0.3", "t": t0 + 5_000}])) == []
    assert sil.evaluate(iv(2, background(t0 + 25_000))) == []
    got = sil.evaluate(iv(3, background(t0 + 35_000)))
    assert [f.subject for f in got] == ["127.0.0.3"] and got[0].value == pytest.approx(35.0)

    # new talkers on a watched port: learnt during learning, new ones after it; a scan's SYN is not a talker
    nt = NewTalkerDetector([22], history_days=7, learn_minutes=0.25, max_pairs=100)
    ssh = lambda c, s, t: {"src_addr": c, "dst_addr": s, "dst_port": 22, "t": t}  # noqa: E731
    assert nt.evaluate(iv(0, [ssh("10.0.0.1", "192.0.2.22", t0)])) == []
    got = nt.evaluate(iv(2, [ssh("10.0.0.1", "192.0.2.22", t0), ssh("10.0.0.7", "192.0.2.22", t0),
                             {**ssh("203.0.113.9", "192.0.2.23", t0), "packets": 1, "tcp_flags": 2}]))
    assert [(f.subject, f.details["roles"], f.details["ports"]) for f in got] == [("10.0.0.7", "client", [22])]
    assert nt.evaluate(iv(3, [ssh("10.0.0.7", "192.0.2.22", t0)])) == []   # seen now

    # block lists: inline and from a file (a bad line names the file and line, the rest is used)
    bl_file = tmp_path / "block.txt"
    bl_file.write_text("# drop list\n203.0.113.0/24\n")
    bd = BlocklistDetector(["2001:db8:bad::/48"], [str(bl_file)])
    got = bd.evaluate(iv(0, background(t0) + [{"src_addr": "203.0.113.77", "dst_addr": "10.0.0.3", "t": t0},
                                              {"src_addr": "10.0.0.4", "dst_addr": "2001:db8:bad::1", "t": t0}]))
    assert sorted((f.subject, f.details["peers"][0]) for f in got) == [("2001:db8:bad::/48", "10.0.0.4"),
                                                                       ("203.0.113.0/24", "10.0.0.3")]
    bl_file.write_text("203.0.113.0/24\nnot-a-prefix\n")
    with pytest.raises(ValueError, match=r"block.txt line 2: 'not-a-prefix' is not an address or prefix"):
        from flowlake.pipelines.alerts.blocklist import parse_prefixes

        parse_prefixes(bl_file.read_text().splitlines(), str(bl_file))


def test_alerts_table_is_bounded_by_retention(engine_cfg, monkeypatch):
    """lake/alerts is a retention tier: days older than [retention] alerts_days expire."""
    import datetime as dt

    from flowlake.base import config
    from flowlake.pipelines.alerts.store import AlertStore
    from flowlake.pipelines.retention.tiers import lake_tiers

    store = AlertStore.from_config(engine_cfg)
    today = dt.date(2026, 11, 25)
    row = {"id": "a1", "detector": "scan", "subject": "203.0.113.5", "state": "resolved", "severity": "warning",
           "updated": 0, "ended": None, "resolved_at": None, "summary": "s", "value": 1.0, "threshold": 1.0,
           "intervals": 1, "acked_at": None, "acked_by": None, "snoozed_until": None, "details": "{}"}
    with store.lock():
        for age, rid in ((40, "old"), (5, "new")):
            start = int(dt.datetime.combine(today - dt.timedelta(days=age), dt.time(), dt.timezone.utc).timestamp() * 1000)
            store.save([{**row, "id": rid, "started": start, "updated": start}])
    monkeypatch.setenv("FLOWLAKE_RETENTION_ALERTS_DAYS", "30")
    config.reset()
    tier = next(t for t in lake_tiers(config.get(), today) if t.name == "alerts")
    assert tier.limit == "30 days" and len(tier.units) == 2
    assert [u.day for u in tier.expire] == [today - dt.timedelta(days=40)]


def test_busy_interval_paths():
    """What makes the detectors cheap on a busy stream gives the same answers: a FlowBatch
    holding two files is split by file (one file's is kept as it is); the scan window holds
    only scan_window_seconds of intervals and DuckDB keeps none of them after a query;
    fan-in's evidence for many destinations at once is pc.mode's top port (the smallest
    of equals) and pc.unique's first sources, destination by destination."""
    import random

    import pyarrow.compute as pc

    from flowlake.pipelines.alerts.base import Interval
    from flowlake.pipelines.alerts.fan_in import FanInDetector, distinct_sources
    from flowlake.pipelines.alerts.scans import ScanDetector
    from flowlake.pipelines.alerts.source import LedgerIntervals
    from flowlake.pipelines.security_rules import FanInRule, ScanRule
    from flowlake.schemas import FLOW
    from flowlake.schemas.messages import encode_flow_batch

    t0 = 1_764_000_000_000
    li = LedgerIntervals()
    two = flows(background(t0, 5)).to_pylist()
    for i, r in enumerate(two):
        r["source_file"] = "nfcapd.a" if i % 2 else "nfcapd.b"
    li.flows_message(encode_flow_batch(FLOW, two))
    li.flows_message(encode_flow_batch(FLOW, [{**r, "source_file": "nfcapd.a"} for r in two[:3]]))
    li.flows_message(encode_flow_batch(FLOW, []))
    for name, n in (("nfcapd.a", 5), ("nfcapd.b", 3)):
        li.ledger_message(json.dumps({"file": name, "flows": n}).encode())
    got = {name: t for name, t in li.complete()}
    assert sorted(got) == ["nfcapd.a", "nfcapd.b"] and not li.pending
    assert got["nfcapd.a"].num_rows == 5 and set(got["nfcapd.a"]["source_file"].to_pylist()) == {"nfcapd.a"}
    assert got["nfcapd.b"]["file_seq"].to_pylist() == [r["file_seq"] for r in two if r["source_file"] == "nfcapd.b"]

    sd = ScanDetector(ScanRule(), window_seconds=30)
    for k in range(8):
        rows = background(t0 + k * 10_000) + scan("203.0.113.9", 25, t0 + k * 10_000)
        found = sd.evaluate(Interval(f"f{k}", t0 + k * 10_000, t0 + (k + 1) * 10_000, flows(rows)))
        assert [f.subject for f in found] == ["203.0.113.9"]
        assert len(sd.window) == min(k + 1, 3)  # 30 s of 10 s intervals, however many ran before
        assert sd.con.execute("SELECT count(*) FROM duckdb_views() WHERE NOT internal").fetchone()[0] == 0

    rng = random.Random(7)
    rows = [{"src_addr": f"198.18.{rng.randrange(3)}.{rng.randrange(40)}", "dst_addr": f"10.0.0.{rng.randrange(30)}",
             "dst_port": rng.choice([53, 80, 443, 8080]), "t": t0} for _ in range(3000)]
    tab = pa.concat_tables([flows(rows[:1000]), flows(rows[1000:])])  # chunked, as gathered messages are
    fd = FanInDetector(FanInRule(), factor=10, min_pps=5, baseline_minutes=60, warmup_minutes=0.5, max_tracked=1000)
    dsts = sorted({r["dst_addr"] for r in rows})
    evidence = fd._evidence(tab, dsts)
    per = tab.group_by("dst_addr").aggregate([("src_addr", "count_distinct")])
    assert distinct_sources(tab, per["dst_addr"]).tolist() == per["src_addr_count_distinct"].to_pylist()
    for d in dsts:
        mine = tab.filter(pc.equal(tab["dst_addr"], d))
        assert evidence[d] == (pc.mode(mine["dst_port"]).to_pylist()[0]["mode"],
                               pc.unique(mine["src_addr"])[:fd.sample].to_pylist())
