"""Volumetric attacks in the traffic model (issue 36), with their truth.

An Attack is injected into a modelled day (model.generate: ModelParams.attacks, none by
default, so the normal day stays what it was). Each source sends one flow record per
`record_seconds` (a router's short active timeout under attack), packets as the router
exports them (a sampled router's record holds rate-th of them: the collector scales).

Kinds:
    ntp-amplification  UDP from port 123 of many amplifiers to one host, 468-byte packets
    syn-flood          TCP SYN (no ACK) from spoofed sources to port 443 of the busiest local server
    carpet-bomb        UDP (DNS source port 53 reflected) spread over every host of a /24
    ramp               UDP to one host rising linearly from 0 to `pps`: meant to stay below
                       every threshold (the truth says above = False)

The truth event (kind "attack"): name, attack (kind), victim (address, or the /24 for a
carpet bomb), scope, attack_class the detector should give, start_ms, end_ms, pps (peak, real
packets), bps, above (whether it is meant to open an attack).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import numpy as np

KINDS = {"ntp-amplification": ("amplification", "host"), "syn-flood": ("syn", "host"),
         "carpet-bomb": ("amplification", "prefix"), "ramp": ("udp", "host")}


@dataclass
class Attack:
    name: str
    kind: str                 # one of KINDS
    start_hour: float         # in the model day (ModelParams.window places it in a shorter run)
    minutes: float            # how long it lasts (not scaled with a run shorter than a day)
    pps: float                # real packets/s to the victim (the ramp's end value; a carpet bomb's whole /24)
    sources: int = 200
    packet_bytes: int = 468
    router: int = 0           # index into ModelParams.routers: the border it enters by
    record_seconds: float = 1.0
    victim: str = ""          # address (or /24 for a carpet bomb); "" = chosen from the local pool
    above: bool = True        # meant to be detected


def default_attacks() -> list[Attack]:
    """The four of issue 36, above and below [ddos]'s default thresholds (20k pps per host,
    100k pps per /24, baseline floor 10k pps)."""
    return [Attack("ntp-amplification", "ntp-amplification", 10.0, 4, 60_000, sources=300, packet_bytes=468, router=2),
            Attack("syn-flood-web", "syn-flood", 12.0, 3, 80_000, sources=2000, packet_bytes=60, router=0),
            Attack("carpet-bomb", "carpet-bomb", 14.5, 3, 300_000, sources=400, packet_bytes=512, router=1,
                   victim="198.51.100.0/24"),
            Attack("slow-ramp", "ramp", 16.0, 20, 2_000, sources=50, packet_bytes=300, router=0, above=False)]


def attack_flows(rng, start_ms: int, duration_ms: int, params, pools, events: list, m) -> list[np.ndarray]:
    """The flows of params.attacks (model.FLOW_DTYPE rows) and their truth appended to `events`.
    `m`: the model module (its dtype and helpers; passed in, so this module does not import it)."""
    dtype, classes, behaviours = m.FLOW_DTYPE, m.CLASSES, m.BEHAVIOURS
    TCP, UDP, FLAGS_SYN = m.TCP, m.UDP, m.FLAGS_SYN  # noqa: N806  (the model's constants)
    remote_v4, remote_as_v4, _interfaces = m.remote_v4, m.remote_as_v4, m._interfaces  # noqa: N806

    parts = []
    for a in getattr(params, "attacks", []) or []:
        if a.kind not in KINDS:
            raise ValueError(f"attack {a.name}: kind {a.kind!r}, one of {', '.join(KINDS)}")
        t0, _ = params.window(start_ms, duration_ms, a.start_hour, a.minutes)
        t1 = min(t0 + int(a.minutes * 60_000), start_ms + duration_ms)  # real minutes, however short the run
        step = max(100, int(a.record_seconds * 1000))
        slots = np.arange(t0, t1, step, dtype=np.int64)
        if len(slots) == 0:
            continue
        n_src = max(1, a.sources)
        n = len(slots) * n_src
        f = np.zeros(n, dtype)
        f["t_start"] = np.repeat(slots, n_src)
        f["t_end"] = np.minimum(f["t_start"] + step - 1, t1)
        f["router"] = a.router
        f["inbound"] = True
        src = remote_v4(rng, n_src, params.local_prefixes)
        f["src4"] = np.tile(src, len(slots))
        f["src_as"] = remote_as_v4(f["src4"])
        f["dst_as"] = params.site_as
        cls, scope = KINDS[a.kind]
        if scope == "prefix":
            net = ipaddress.ip_network(a.victim or "198.51.100.0/24")
            hosts = np.array([int(h) for h in net.hosts()], np.uint32)
            f["dst4"] = hosts[rng.integers(0, len(hosts), n)]
            victim = str(net)
        else:
            if a.victim:
                dst = int(ipaddress.IPv4Address(a.victim))
            else:  # the busiest local host of the pool (rank 0 of the Zipf draw): a server with a baseline
                dst = int(pools["l4"][0])
            f["dst4"] = dst
            victim = str(ipaddress.IPv4Address(dst))
        # real packets per record: pps spread over the sources; the ramp rises linearly
        frac = np.ones(n) if a.kind != "ramp" else (f["t_start"] - t0 + step) / max(1, t1 - t0)
        real = a.pps * frac * (step / 1000.0) / n_src
        rate = max(1, params.routers[a.router].sampling_rate)
        pk = np.maximum(1, np.round(real / rate)).astype(np.uint64)
        f["packets"] = pk
        f["bytes"] = pk * np.uint64(a.packet_bytes)
        if a.kind == "syn-flood":
            f["proto"], f["tcp_flags"] = TCP, FLAGS_SYN
            f["src_port"] = rng.integers(1024, 65535, n)
            f["dst_port"] = 443
        elif a.kind == "ntp-amplification":
            f["proto"], f["src_port"] = UDP, 123
            f["dst_port"] = rng.integers(1024, 65535, n)
        elif a.kind == "carpet-bomb":
            f["proto"], f["src_port"] = UDP, 53
            f["dst_port"] = rng.integers(1024, 65535, n)
        else:
            f["proto"] = UDP
            f["src_port"] = rng.integers(1024, 65535, n)
            f["dst_port"] = 5060
        f["klass"] = classes.index("event")
        f["behaviour"] = behaviours.index("other")
        f["event"] = len(events) + 1
        _interfaces(f, rng, params)
        parts.append(f)
        scaled = pk.astype(float) * rate
        events.append({"kind": "attack", "name": a.name, "attack": a.kind, "victim": victim, "scope": scope,
                       "attack_class": cls, "router": params.routers[a.router].name,
                       "start_ms": int(t0), "end_ms": int(t1), "pps": float(a.pps),
                       "bps": float(a.pps * a.packet_bytes * 8), "above": bool(a.above),
                       "flows": int(n), "packets": int(scaled.sum()), "bytes": int(scaled.sum() * a.packet_bytes)})
    return parts


def score(attacks: list[dict], events: list[dict], slack_ms: int = 120_000) -> dict:
    """attacks: records (ms times: started, detected interval end as `opened_ms` if given).
    -> attacks, tp, fp, events above, found, precision, recall, ttd_s per found event
    (opened_ms - the event's start), missed names, false victims, below-threshold events opened."""
    truth = [e for e in events if e.get("kind") == "attack"]
    want = [e for e in truth if e["above"]]
    below = [e for e in truth if not e["above"]]
    tp, found, ttd, fp = 0, {}, [], []
    for a in attacks:
        hit = [i for i, e in enumerate(want) if e["victim"] == a["victim"]
               and e["start_ms"] - slack_ms <= a["started"] <= e["end_ms"] + slack_ms]
        if hit:
            tp += 1
            for i in hit:
                if i not in found:
                    found[i] = a
                    ttd.append((a.get("opened_ms", a["updated"]) - want[i]["start_ms"]) / 1000)
        else:
            fp.append(a)
    return {"attacks": len(attacks), "tp": tp, "fp": len(fp), "events": len(want), "found": len(found),
            "precision": tp / len(attacks) if attacks else 1.0, "recall": len(found) / len(want) if want else None,
            "ttd_s": ttd, "missed": [want[i]["name"] for i in range(len(want)) if i not in found],
            "false": sorted({a["victim"] for a in fp})[:10],
            "below_opened": [e["name"] for e in below if any(a["victim"] == e["victim"]
                                                             and e["start_ms"] <= a["started"] <= e["end_ms"]
                                                             for a in attacks)],
            "classes": {want[i]["name"]: (want[i]["attack_class"], a["attack_class"]) for i, a in found.items()}}
