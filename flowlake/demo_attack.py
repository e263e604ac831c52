"""`flowlake demo`'s attack (issue 36): after the modelled day, one NTP amplification sent in
real time to a host of the operator's, so the Attacks dashboard shows an attack with its data
and the mitigation (dry-run by default) what it would announce.

Real time, because the day itself is exported far faster than real time: an nfcapd file of
the day holds hours of flow time, and the detector measures each file's last 300 s in 1 s
bins (pipelines/alerts/ddos.py). The attack comes from a router of its own (as
bench/ddos.py's), at three times [ddos] threshold_pps, for longer than [ddos]
min_duration_seconds, so the mitigation loop decides on it.
"""
from __future__ import annotations

import ipaddress
import json
import threading
import time

ROUTER = "127.0.0.5"  # the attack's border router: none of the demo day's exporters
HOST_OFFSET = 77      # the victim: this host of the first prefix of [site] local_prefixes that may be announced


def victim(cfg) -> str:
    """A host of the operator's that the mitigation's safety rules allow (not in the allow-list)."""
    from flowlake.pipelines.mitigation import policy  # noqa: PLC0415  (start-up: the demo only)

    rules = policy.rules_from_config(cfg)
    for net in rules.own:
        if net.version != 4 or net.num_addresses <= HOST_OFFSET:
            continue
        host = ipaddress.ip_network(f"{net.network_address + HOST_OFFSET}/32")
        if not policy.unsafe(host, rules):
            return str(host.network_address)
    raise RuntimeError("no IPv4 host of [site] local_prefixes outside [ddos] allow_list for the demo's attack")


def _attacks(cfg) -> list[dict]:
    from flowlake.pipelines.alerts.attacks import attacks_file  # noqa: PLC0415  (start-up: the demo only)

    try:
        return json.loads(attacks_file(cfg).read_text()).get("attacks") or []
    except (OSError, ValueError, AttributeError):
        return []


def _mitigation(cfg, attack_id: str) -> str:
    from flowlake.pipelines.mitigation import store  # noqa: PLC0415  (start-up: the demo only)

    return str((store.read_status(cfg).get("by_attack") or {}).get(attack_id, ""))


def _wait(check, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    return None


def show(cfg, console, protocol: str = "v9", seconds: float = 60.0, pps: float = 0.0) -> dict:
    """Send the attack, wait for its record and the mitigation's decision; what happened."""
    from flowlake.collectors.traffic import api, model  # noqa: PLC0415  (start-up: numpy, scipy)
    from flowlake.collectors.traffic.attacks import Attack  # noqa: PLC0415  (start-up: numpy)

    if not cfg.ddos.enabled:
        console.print("[yellow]no attack shown: [ddos] enabled = false")
        return {}
    target = (cfg.collector.bind if cfg.collector.bind != "0.0.0.0" else "127.0.0.1", cfg.collector.port)
    host = victim(cfg)
    rate = pps or 3 * float(cfg.ddos.threshold_pps)
    p = api.params_for(protocol, cfg)
    p.routers = [model.Router("attack-edge", ROUTER, 1.0)]
    p.bulk, p.scanners, p.fanin, p.teleimmersion = [], [], [], []
    p.attacks = [Attack("demo-ntp-amplification", "ntp-amplification", 0.0, seconds / 60, rate, sources=200,
                        packet_bytes=468, router=0, victim=host)]
    before = {str(a.get("id")) for a in _attacks(cfg)}
    console.print(f"an NTP amplification on {host}: {rate:,.0f} pkt/s for {seconds:.0f} s, in real time")
    sent: dict = {}
    start_ms, t0 = int(time.time() * 1000), time.monotonic()
    th = threading.Thread(target=lambda: sent.update(api.generate_day(
        target, start_ms, seconds, 0, protocol=protocol, speedup=1.0, params=p, seed=36, cfg=cfg)), daemon=True)
    th.start()
    timeout = seconds + 6 * float(cfg.collector.rotate_seconds) + 60
    found = _wait(lambda: [a for a in _attacks(cfg) if a.get("victim") == host and str(a.get("id")) not in before],
                  timeout)
    out: dict = {"victim": host, "attack": None, "detected_s": None, "mitigation": ""}
    if not found:
        th.join(seconds + 60)
        console.print(f"[yellow]the attack on {host} was not detected within {timeout:.0f} s "
                      "(`flowlake status`: is the alerts service running?)")
        return out
    a = found[0]
    out.update(attack=a["id"], detected_s=round(time.monotonic() - t0, 1))
    console.print(f"attack {a['id']} ({a['attack_class']}) on {host} recorded {out['detected_s']} s after it began")
    from flowlake.pipelines.mitigation import service  # noqa: PLC0415  (start-up: the demo only)

    if service.wanted(cfg):
        said = _wait(lambda: (lambda s: s if s and not s.startswith("waiting") else "")(_mitigation(cfg, a["id"])),
                     timeout)
        out["mitigation"] = said or _mitigation(cfg, a["id"])
        console.print(f"mitigation ([ddos] mitigation = {cfg.ddos.mitigation}): {out['mitigation'] or 'no decision'}")
    th.join(seconds + 60)
    return out
