"""DDoS detection on the live stream (issue 36), through real nfcapd (10 s files, as the
issue's figure has it), the real shipper and Kafka: a minute of normal modelled border
traffic, and into it an NTP amplification on one host from a router of its own, started
1.5 s before a rotation (the phase where the window no longer fits in the attack's first
file). The alerts service (as `flowlake up` starts it) must open the attack record within
20 s of the attack's first flow reaching nfcapd, open nothing else, and show it in
`flowlake attacks list --json` and `flowlake status --json`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from flowlake import components
from flowlake.base import config
from flowlake.collectors import nfcapd
from flowlake.collectors.traffic import api, model
from flowlake.collectors.traffic.attacks import Attack
from flowlake.pipelines.alerts import service
from flowlake.pipelines.alerts.attacks import attacks_file

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
FLOWLAKE = str(REPO / ".venv" / "bin" / "flowlake")
ROTATE = 10
VICTIM = "192.0.2.77"


def _wait(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _current() -> list[dict]:
    try:
        return json.loads(attacks_file(config.get()).read_text())["attacks"]
    except (OSError, ValueError, KeyError):
        return []


def attack_only(cfg) -> model.ModelParams:
    """No background, no events: only the attack, from a router of its own (unsampled)."""
    p = api.params_for("v9", cfg)
    p.routers = [model.Router("attack-edge", "127.0.0.5", 1.0)]
    p.bulk, p.scanners, p.fanin, p.teleimmersion = [], [], [], []
    # 60k pkt/s of NTP responses (3 x [ddos] threshold_pps) for 25 s, from 200 amplifiers
    p.attacks = [Attack("ntp-live", "ntp-amplification", 0.0, 25 / 60, 60_000, sources=200, packet_bytes=468,
                        router=0, victim=VICTIM)]
    return p


def test_attack_record_within_20_s_through_kafka(kafka, flowlake_home, monkeypatch, figure):
    for k, v in {"FLOWLAKE_ALERTS_START_FROM": "latest", "FLOWLAKE_ALERTS_GROUP_ID": f"ddos-test-{os.getpid()}",
                 "FLOWLAKE_COLLECTOR_ROTATE_SECONDS": str(ROTATE), "FLOWLAKE_DDOS_WARMUP_MINUTES": "0"}.items():
        monkeypatch.setenv(k, v)
    config.reset()
    cfg = config.get()
    shutil.rmtree(cfg.lake / "attacks", ignore_errors=True)
    shutil.rmtree(cfg.path("state", "ddos"), ignore_errors=True)
    shutil.rmtree(cfg.path("state", "alerts"), ignore_errors=True)
    started, background = [], {}
    try:
        for name, start in (("nfcapd", nfcapd.start), ("shipper", lambda c: components.get(c, "shipper").start()),
                            ("alerts", service.start)):
            start(cfg)
            started.append(name)
        status = lambda: json.loads(service.status_file(cfg).read_text())  # noqa: E731
        _wait(lambda: status().get("assigned"), 60, "the alerts service's partitions")

        def normal():
            background["truth"] = api.generate_day(("127.0.0.1", cfg.collector.port), int(time.time() * 1000), 60,
                                                   30_000, protocol="v9", speedup=1.0, seed=11, cfg=cfg)
        bg = threading.Thread(target=normal, daemon=True)
        bg.start()
        # the attack starts 1.5 s before a rotation, some 20 s into the normal traffic
        now = time.time()
        boundary = (int(now) // ROTATE + 3) * ROTATE
        time.sleep(max(0.0, boundary - 1.5 - time.time()))
        start_ms = int(time.time() * 1000)
        called = time.time()
        result = {}

        def attack():
            result["truth"] = api.generate_day(("127.0.0.1", cfg.collector.port), start_ms, 25, 0, protocol="v9",
                                               speedup=1.0, seed=12, params=attack_only(cfg), cfg=cfg)
        at = threading.Thread(target=attack, daemon=True)
        at.start()
        opened = _wait(lambda: [a for a in _current() if a["victim"] == VICTIM], 60, "the attack record")
        detected = time.time()
        at.join(60)
        bg.join(90)
        exported = result["truth"]["_exported"][0][0]
        # the first attack datagram is sent (model time - start) after the send began, itself after `called`
        first_sent = called + (int(exported["t_end"].min()) - start_ms) / 1000.0
        ttd = detected - first_sent
        # the normal minute is judged to its end, with nothing opened but the attack
        end_ms = background["truth"]["end_ms"]
        _wait(lambda: (status().get("last_interval") or {}).get("end_ms", 0) >= end_ms - ROTATE * 1000, 90,
              "the alerts service to judge the normal minute")
        current = _current()
        listed = json.loads(subprocess.run([FLOWLAKE, "attacks", "list", "--json"], capture_output=True, text=True,
                                           check=True).stdout)
        st = json.loads(subprocess.run([FLOWLAKE, "status", "--json"], capture_output=True, text=True,
                                       check=True).stdout)
    finally:
        for name in reversed(started):
            {"nfcapd": nfcapd.stop, "shipper": lambda c: components.get(c, "shipper").managed().stop(timeout=30),
             "alerts": service.stop}[name](cfg)
        config.reset()

    assert ttd <= 20.0, f"time to detect {ttd:.1f} s"
    a = opened[0]
    assert a["attack_class"] == "amplification" and a["src_ports"] == [123] and a["protocol"] == 17
    assert 30_000 <= a["peak_pps"] <= 70_000, a
    assert {x["victim"] for x in current} == {VICTIM}, current  # the normal minute opened nothing
    assert [x["victim"] for x in listed] == [VICTIM] and listed[0]["mitigation"] == "none"
    assert st["attacks"]["enabled"] and [x["victim"] for x in st["attacks"]["open"]] == [VICTIM]
    figure(f"ddos through nfcapd+shipper+Kafka (rotation {ROTATE} s, attack started 1.5 s before a rotation, "
           f"beside {background['truth']['totals']['flows']:,} normal flows a minute): attack record "
           f"{ttd:.1f} s after its first flow reached nfcapd (goal <= 20 s)")
