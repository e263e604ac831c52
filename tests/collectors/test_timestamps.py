"""Timestamps (issue 20): v9 flows timed by router uptime land at the right time across
an uptime wrap (2^32 ms) and a reboot; a broken router's impossible records (First after
Last) are quarantined with the reason. Real nfcapd, the shipper's own checks."""
from __future__ import annotations

import ipaddress
from datetime import datetime, timedelta, timezone

import pytest

from nfcapd_capture import capture_tapped, dump_resolved

# a router exporting live: the checks compare flow times with their arrival
START = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)
DURATION_S = 1200


def _key(exporter: str, f) -> tuple:
    if f["ipv6"]:
        src = ipaddress.IPv6Address(int(f["src6"][0]) << 64 | int(f["src6"][1]))
        dst = ipaddress.IPv6Address(int(f["dst6"][0]) << 64 | int(f["dst6"][1]))
    else:
        src, dst = ipaddress.IPv4Address(int(f["src4"])), ipaddress.IPv4Address(int(f["dst4"]))
    sport, dport = (0, int(f["dst_port"])) if f["proto"] in (1, 58) else (int(f["src_port"]), int(f["dst_port"]))
    return exporter, str(src), str(dst), sport, dport, int(f["proto"]), int(f["packets"]), int(f["bytes"])


@pytest.mark.integration
def test_uptime_wrap_reboot_and_impossible_times(tmp_path, nfdump_bin):
    import json
    import subprocess

    from flowlake.base.gobuild import SHIPPER
    from flowlake.collectors.traffic import api, model

    t0 = int(START.timestamp() * 1000)
    half = t0 + DURATION_S * 500
    p = api.params_for("v9")
    p.bulk, p.scanners, p.fanin, p.teleimmersion = [], [], [], []
    p.routers = [model.Router("wraps", "127.0.0.101", 1.0, boot_ms=half - (1 << 32)),  # uptime wraps half way
                 model.Router("reboots", "127.0.0.102", 1.0, reboot_at_ms=half),
                 model.Router("broken", "127.0.0.103", 1.0, swap_times_every=5)]
    docs = []
    f, _ = capture_tapped(tmp_path / "spool", tmp_path / "tap", lambda port: docs.append(api.generate_day(
        ("127.0.0.1", port), START, DURATION_S, 1500, "v9", params=p, seed=5, max_rate=50_000)))
    raw = {(r["exporter"], r["src_addr"], r["dst_addr"], r["src_port"], r["dst_port"], r["proto"], r["packets"],
            r["bytes"]): r for r in dump_resolved(f)}
    out = subprocess.run([str(SHIPPER.build()), "dump", "--check-times", str(f)], capture_output=True, text=True,
                         check=True).stdout
    checked = [json.loads(line) for line in out.splitlines()]
    got = {(r["exporter"], r["src_addr"], r["dst_addr"], r["src_port"], r["dst_port"], r["proto"], r["packets"],
            r["bytes"]): r for r in checked}
    doc = docs[-1]
    assert len(got) == len(checked) == doc["totals"]["flows"]  # keys are unique: every flow matched
    wrapped_by_nfcapd = corrected = quarantined = 0
    for router, (flows, boot, swapped) in zip(p.routers, doc["_exported"]):
        for row, b, bad in zip(flows, boot, swapped):
            k = _key(router.address, row)
            r = got[k]
            if bad:
                assert "the router's First is after its Last" in r["quarantine_reason"], r
                quarantined += 1
                continue
            assert r["quarantine_reason"] == "", r
            # uptime counts from the boot in force at export: a flow begun before a reboot starts at it
            up = int(b) + 1
            assert (r["time_start"], r["time_end"]) == (max(int(row["t_start"]), up), max(int(row["t_end"]), up)), \
                (router.name, r, int(row["t_start"]) - t0, int(b) - t0)
            if r["time_corrected"]:
                assert "uptime wrapped" in r["time_corrected"] and router.name == "wraps"
                corrected += 1
                assert raw[k]["time_end"] - r["time_end"] == 1 << 32  # nfcapd put it 49.7 days ahead
                wrapped_by_nfcapd += 1
    assert quarantined == doc["exporters"][2]["swapped_times"] > 0
    assert corrected > 0  # records from before the wrap, exported after it, really happened
    assert {e["name"]: e["swapped_times"] for e in doc["exporters"]} == {"wraps": 0, "reboots": 0, "broken": quarantined}
