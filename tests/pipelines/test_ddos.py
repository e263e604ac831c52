"""DDoS detection (issue 36): the detector on hand-made intervals (classes, thresholds,
overrides, carpet bombs, baseline, bad values), on the traffic model's day with injected
attacks (recall, precision, time to detect), and what it leaves for others: lake/attacks
(Delta), state/ddos/attacks.json (the mitigation half's input) and `flowlake attacks`.
No services: the detector runs in this process."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pytest

from flowlake.base import config
from flowlake.collectors.traffic import lake_rows, model
from flowlake.collectors.traffic.alert_truth import intervals
from flowlake.collectors.traffic.attacks import default_attacks, score
from flowlake.pipelines.alerts.attacks import AttackStore, attacks_file, mitigations_file, read_current
from flowlake.pipelines.alerts.base import Interval
from flowlake.pipelines.alerts.ddos import (
    AttackSink,
    DdosConfigError,
    DdosDetector,
    DdosSettings,
    Networks,
    parse_overrides,
)
from flowlake.pipelines.alerts.engine import Engine
from flowlake.schemas import FLOW
from flowlake.schemas.messages import arrow_schema

REPO = Path(__file__).resolve().parents[2]
FLOWLAKE = str(REPO / ".venv" / "bin" / "flowlake")
T0 = 1_790_000_000_000 - 1_790_000_000_000 % 10_000


def flows(rows: list[dict]) -> pa.Table:

    base = {"exporter": "127.0.0.2", "input_if": 1, "output_if": 10, "src_addr": "203.0.113.9", "src_port": 40000,
            "dst_port": 443, "proto": 6, "tcp_flags": 0x1B, "tos": 0, "packets": 10, "bytes": 5000,
            "sampling_rate": 1, "src_as": 0, "dst_as": 0, "source_file": "t", "file_seq": 0}
    out = []
    for r in rows:
        out.append({**base, "time_start": r.get("ts", r["t"] - 500), "time_end": r["t"],
                    **{k: v for k, v in r.items() if k not in ("t", "ts")}})
    return pa.Table.from_pylist(out, schema=arrow_schema(FLOW))


def flood(dst: str, pps: float, start: int, seconds: int, sources: int = 50, **kw) -> list[dict]:
    """`pps` packets/s to dst from `sources` sources, one record per source and second."""
    per = max(1, int(pps / sources))
    return [{"src_addr": f"203.0.{113 + i // 250}.{i % 250 + 1}", "dst_addr": dst, "packets": per,
             "bytes": per * kw.get("size", 100), "ts": start + s * 1000, "t": start + s * 1000 + 999,
             **{k: v for k, v in kw.items() if k != "size"}}
            for s in range(seconds) for i in range(sources)]


def background(t0: int, n: int = 200) -> list[dict]:
    return [{"src_addr": f"198.18.0.{i % 50 + 1}", "dst_addr": f"10.1.0.{i % 30 + 1}", "t": t0 + (i * 37) % 10_000}
            for i in range(n)]


@pytest.fixture
def ddos_cfg(flowlake_home, monkeypatch):

    monkeypatch.setenv("FLOWLAKE_DDOS_WARMUP_MINUTES", "0")
    config.reset()
    cfg = config.get()
    shutil.rmtree(cfg.lake / "attacks", ignore_errors=True)
    shutil.rmtree(cfg.path("state", "ddos"), ignore_errors=True)
    yield cfg
    config.reset()


def detector(cfg, **settings):

    s = DdosSettings.from_config(cfg)
    for k, v in settings.items():
        setattr(s, k, v)
    return DdosDetector(s, Networks.from_config(cfg), AttackSink.from_config(cfg))


def run(det, rows: list[dict], start: int, seconds: int = 10):

    return det.evaluate(Interval("f", start, start + seconds * 1000, flows(rows)))


def test_classes_thresholds_and_bad_values(ddos_cfg):
    det = detector(ddos_cfg)
    t = T0
    rows = background(t)
    rows += flood("10.1.2.3", 50_000, t, 10, proto=17, src_port=123, dst_port=40000, tcp_flags=0, size=468)
    rows += flood("10.1.2.4", 40_000, t, 10, proto=6, tcp_flags=0x02, dst_port=80, size=60)
    rows += flood("10.1.2.5", 30_000, t, 10, proto=1, src_port=0, dst_port=2048, tcp_flags=0, size=84)
    rows += flood("10.1.2.6", 30_000, t, 10, proto=17, src_port=0, dst_port=0, tcp_flags=0, size=1480)
    rows += flood("10.1.2.7", 30_000, t, 10, proto=17, src_port=40000, dst_port=9999, tcp_flags=0, size=200)
    rows += flood("10.1.2.8", 4_000, t, 10, proto=17, src_port=123, dst_port=40000, tcp_flags=0)  # below all
    rows += flood("203.0.113.200", 90_000, t, 10, proto=17, src_port=123, tcp_flags=0)  # not ours: never judged
    # bad values: nulls everywhere a flow can have them, negative and huge counters
    rows += [{"dst_addr": None, "t": t + 5000}, {"dst_addr": "10.1.2.9", "packets": None, "bytes": None, "proto": None,
                                                 "src_port": None, "tcp_flags": None, "t": t + 5000},
             {"dst_addr": "not an address", "t": t + 5000}, {"dst_addr": "10.1.2.9", "packets": -5, "t": t + 5000},
             {"dst_addr": "10.1.2.10", "ts": t + 9000, "t": t + 1000}]  # ends before it starts
    found = run(det, rows, t)
    got = {f.subject: f.details["attack_class"] for f in found}
    assert got == {"10.1.2.3": "amplification", "10.1.2.4": "syn", "10.1.2.5": "icmp", "10.1.2.6": "fragments",
                   "10.1.2.7": "udp"}, got
    a = det.open["10.1.2.3"]
    assert 45_000 <= a["peak_pps"] <= 55_000 and a["protocol"] == 17 and a["src_ports"] == "123"
    assert abs(a["peak_bps"] - a["peak_pps"] * 468 * 8) < 1e-6 * a["peak_bps"]
    assert a["exporters"] == "127.0.0.2" and a["input_interfaces"] == "127.0.0.2/1"
    assert len(a["top_sources"].split(", ")) == 10 and a["started"] == t
    # the contract file for the mitigation half

    doc = json.loads(attacks_file(ddos_cfg).read_text())
    assert doc["updated"].endswith("Z")
    by = {x["victim"]: x for x in doc["attacks"]}
    assert set(by) == set(got)
    x = by["10.1.2.3"]
    assert set(x) >= {"id", "victim", "attack_class", "protocol", "src_ports", "dst_ports", "peak_pps", "peak_bps",
                      "started", "updated", "ended"}
    assert x["src_ports"] == [123] and x["protocol"] == 17 and x["ended"] is None and isinstance(x["peak_pps"], float)


def test_overrides_window_and_end(ddos_cfg):

    ov = parse_overrides([{"prefix": "10.1.2.0/24", "threshold_pps": 100_000.0},
                          {"prefix": "10.1.2.4/32", "class": "syn", "threshold_pps": 1000.0}])
    det = detector(ddos_cfg, overrides=ov, baseline_factor=0.0)
    t = T0
    rows = flood("10.1.2.3", 50_000, t, 10, proto=17, tcp_flags=0)  # over 20k but its /24 allows 100k
    rows += flood("10.1.2.4", 2_000, t, 10, proto=6, tcp_flags=0x02)  # syn over its own 1k
    rows += flood("10.1.3.1", 50_000, t + 8000, 2, proto=17, tcp_flags=0)  # 2 s at the interval's end: a window
    found = {f.subject for f in run(det, rows, t)}
    assert found == {"10.1.2.4", "10.1.3.1"}
    # ends after end_after_seconds without holding; the attack stays in attacks.json an hour
    for k in range(1, 8):
        run(det, background(t + k * 10_000), t + k * 10_000)
    assert not det.open and {a["victim"] for a in det.recent} == found

    cur = read_current(ddos_cfg)["attacks"]
    assert all(a["ended"] for a in cur) and len(cur) == 2
    for bad, msg in (([{"prefix": "10.1.2.0/33"}], "prefix"), ([{"class": "smurf"}], "class"),
                     ([{"threshold_pps": "lots"}], "threshold_pps"), (["10.0.0.0/8"], "not a table"),
                     ([{"thresold_pps": 1.0}], "unknown key")):
        with pytest.raises(DdosConfigError, match=msg):
            parse_overrides(bad)


def test_carpet_bomb_and_baseline(ddos_cfg):
    det = detector(ddos_cfg, prefix_min_hosts=16)
    t = T0
    # a /24 carpet: 250 hosts x 1000 pps, each far below the host thresholds and floor, 250k together
    rows = [r for h in range(1, 251) for r in flood(f"198.51.100.{h}", 1000, t, 10, sources=8, proto=17,
                                                     src_port=53, tcp_flags=0)]
    found = {f.subject: f for f in run(det, rows, t)}
    assert set(found) == {"198.51.100.0/24"}
    assert det.open["198.51.100.0/24"]["scope"] == "prefix" and det.open["198.51.100.0/24"]["hosts"] == 250
    # baseline: hosts used to 300 and 2500 pkt/s learn it; 15k (under the 20k absolute threshold, over
    # the 10k floor) is an attack on the first (> 10 x 300), not on the second (< 10 x 2500)
    det2 = detector(ddos_cfg)
    t2 = t + 3_600_000
    udp = {"proto": 17, "tcp_flags": 0, "dst_port": 5000}  # the baseline judges the attack classes, not the total
    for k in range(120):
        ts = t2 + k * 10_000
        quiet = flood("10.7.0.1", 300, ts, 10, sources=5, **udp) + flood("10.7.0.2", 2500, ts, 10, sources=5, **udp)
        assert not run(det2, quiet, ts)
    t3 = t2 + 120 * 10_000
    both = flood("10.7.0.1", 15_000, t3, 10, sources=5, **udp) + flood("10.7.0.2", 15_000, t3, 10, sources=5, **udp)
    got = run(det2, both, t3)
    assert [f.subject for f in got] == ["10.7.0.1"]
    assert "baseline" in det2.open["10.7.0.1"]["threshold"]


def model_day(attacks, n_flows: int, hours: float = 2.0, seed: int = 5):

    p = model.ModelParams(attacks=attacks)
    day0 = T0 - T0 % 86_400_000
    f, events = model.generate(p, day0, int(hours * 3_600_000), n_flows, seed=seed)
    return lake_rows.lake_table(f, p), events, day0


def replay(cfg, table, day0, hours, rotate=10.0):

    det = detector(cfg, warmup_minutes=10.0)
    opened, cpu0 = {}, time.process_time()
    n = 0
    for name, s, e, part in intervals(table, day0, day0 + int(hours * 3_600_000), rotate):
        det.evaluate(Interval(name, s, e, part))
        n += 1
        for a in det.open.values():
            opened.setdefault(a["id"], {**a, "opened_ms": e})
    cpu = time.process_time() - cpu0
    return det, list(opened.values()), cpu, n


def test_normal_day_opens_nothing(ddos_cfg, figure):
    table, events, day0 = model_day([], 400_000)
    det, opened, cpu, n = replay(ddos_cfg, table, day0, 2.0)
    assert opened == [], [(a["victim"], a["attack_class"], a["threshold"]) for a in opened]
    figure(f"ddos normal day: {table.num_rows:,} flows in {n} intervals of 10 s, 0 attacks opened "
           f"(precision 1.0); detector {cpu:.1f} CPU s")


def test_model_attacks_recall_precision_time_to_detect(ddos_cfg, figure):

    # the model day in two hours (events keep their place in the day, attacks their length)
    table, events, day0 = model_day(default_attacks(), 400_000, hours=2.0, seed=7)
    det, opened, cpu, n = replay(ddos_cfg, table, day0, 2.0)
    sc = score(opened, events)
    assert sc["recall"] == 1.0, sc
    assert sc["precision"] == 1.0, sc
    assert sc["below_opened"] == [], sc
    assert all(want == got for want, got in sc["classes"].values()), sc["classes"]
    # flow time from the attack's first packet to the end of the interval that opened it:
    # at most two rotations (the window must fit in the attack's first file, or the next one)
    assert max(sc["ttd_s"]) <= 20.0, sc["ttd_s"]
    figure(f"ddos model day: {sc['events']} attacks above threshold, recall {sc['recall']:.2f}, precision "
           f"{sc['precision']:.2f}, slow ramp not opened; time to detect (flow time, attack start -> end of the "
           f"interval that opened it) {', '.join(f'{x:.1f}' for x in sc['ttd_s'])} s; {table.num_rows:,} flows, "
           f"{n} intervals, detector {cpu:.1f} CPU s")


def test_lake_store_and_cli(ddos_cfg):
    det = detector(ddos_cfg)
    t = T0
    run(det, flood("10.1.2.3", 50_000, t, 10, proto=17, src_port=123, tcp_flags=0, size=468), t)
    aid = det.open["10.1.2.3"]["id"]

    rows = AttackStore.from_config(ddos_cfg).read()
    assert [r["id"] for r in rows] == [aid] and rows[0]["ended"] is None
    assert (ddos_cfg.lake / "attacks" / "_delta_log").is_dir()
    env = dict(os.environ)
    out = json.loads(subprocess.run([FLOWLAKE, "attacks", "list", "--json"], capture_output=True, text=True,
                                    env=env, check=True).stdout)
    assert [a["id"] for a in out] == [aid]
    assert set(out[0]) >= {"id", "victim", "attack_class", "peak_pps", "peak_bps", "started", "ended", "mitigation"}
    assert out[0]["mitigation"] == "none" and out[0]["victim"] == "10.1.2.3"
    mitigations_file(ddos_cfg).write_text(json.dumps({"by_attack": {aid: "dry-run"}}))
    out = json.loads(subprocess.run([FLOWLAKE, "attacks", "list", "--json"], capture_output=True, text=True,
                                    env=env, check=True).stdout)
    assert out[0]["mitigation"] == "dry-run"
    shown = subprocess.run([FLOWLAKE, "attacks", "show", aid[:6]], capture_output=True, text=True, env=env)
    assert shown.returncode == 0 and "10.1.2.3" in shown.stdout and "amplification" in shown.stdout
    missing = subprocess.run([FLOWLAKE, "attacks", "show", "ffffffffffff"], capture_output=True, text=True, env=env)
    assert missing.returncode != 0 and "ffffffffffff" in missing.stderr
    # ended: the lake row gets its end
    for k in range(1, 8):
        run(det, background(t + k * 10_000), t + k * 10_000)
    rows = AttackStore.from_config(ddos_cfg).read()
    assert rows[0]["ended"] == rows[0]["updated"] and rows[0]["intervals"] == 1


def test_detector_in_the_engine_feeds_the_alert_channels(ddos_cfg):

    class Recorder:
        def __init__(self):
            self.events = []

        def submit(self, alert):
            self.events.append(alert)

    rec = Recorder()
    engine = Engine.from_config(ddos_cfg, sinks=[rec])
    assert any(d.name == "ddos" for d in engine.detectors)
    engine.process("nfcapd.1", flows(flood("10.1.2.3", 50_000, T0, 10, proto=17, src_port=123, tcp_flags=0)),
                   now_ms=T0 + 10_000)
    assert [(e["detector"], e["subject"], e["event"]) for e in rec.events] == [("ddos", "10.1.2.3", "opened")]
    assert "amplification attack on 10.1.2.3" in rec.events[0]["summary"]


def test_a_replayed_hour_in_one_interval_is_not_an_attack(ddos_cfg):
    """One file holding an hour of a host's ordinary traffic (a modelled day sent in
    seconds, an archive imported through the live stack): measured over its last MAX_BINS
    seconds, the flows that ended before them are history. Piled into the first bin they
    were a flood of 3,600 seconds' packets in one (a false attack); the same rate as a live
    flood in the last seconds is still found."""
    det = detector(ddos_cfg, baseline_factor=0.0)
    hour = flood("10.1.2.3", 2_000, T0 - 3_600_000, 3_600, sources=20, proto=17, tcp_flags=0)
    # piled into one bin, the hour would be a flood far over the threshold
    assert sum(r["packets"] for r in hour) / det.s.window_s > 10 * det.s.thresholds["threshold_pps"]
    assert det.evaluate(Interval("f", T0 - 3_600_000, T0, flows(hour))) == []
    last = flood("10.1.2.4", 50_000, T0 - 10_000, 10, proto=17, src_port=123, tcp_flags=0)
    got = det.evaluate(Interval("g", T0 - 3_600_000, T0, flows(hour + last)))
    assert {f.subject for f in got} == {"10.1.2.4"}


def test_an_interval_spanning_days_is_binned_over_its_flows(ddos_cfg):
    """The first file after a gap (a stack back after days) spans days: the detector bins only
    the seconds its flows cover (at most MAX_BINS), not every second of the interval (that
    was a flows x 5.9 M bins matrix, 22 GiB, in the test run), and still finds the flood."""
    det = detector(ddos_cfg, baseline_factor=0.0)
    days = 30 * 86400
    rows = flood("10.1.2.3", 50_000, T0, 10, proto=17, src_port=123, tcp_flags=0)
    got = det.evaluate(Interval("f", T0 - days * 1000, T0 + 10_000, flows(rows)))
    assert {f.subject for f in got} == {"10.1.2.3"}, "the flood at the interval's end is found"
