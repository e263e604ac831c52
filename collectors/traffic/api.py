"""generate_day(): the one call behind `flowlake generate` and `flowlake demo`."""
from __future__ import annotations

import dataclasses
import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from . import exporter, model, netflow, ping, truth as truth_mod

PROTOCOLS = {"v5": 5, "v9": 9, "ipfix": 10}
ROUTER_UPTIME_MS = 3_600_000  # routers booted an hour before the run starts

# Measured on nfcapd 1.7.1 (Debian): the v5 header's sampling interval is applied
# (packets and bytes x N, "Sampled" in nfdump -o raw); our v9/IPFIX sampling option
# templates are received but the records stay "Unsampled" with wire counts (nfcapd -s N
# would force a rate for all exporters). Stated in the truth, checked by the tests.
COLLECTOR_SCALES_SAMPLED = {"v5": True, "v9": False, "ipfix": False}


def params_for(protocol: str, cfg=None) -> model.ModelParams:
    """Model defaults, site prefixes from configuration, limits of the export format."""
    p = model.ModelParams()
    if cfg is not None:
        p.local_prefixes = list(cfg.site.local_prefixes)
    if not any(":" in x for x in p.local_prefixes):
        p.ipv6_fraction = 0.0
    if protocol == "v5":  # IPv4 only, 32-bit counters
        p.ipv6_fraction = 0.0
        for s in p.sizes.values():
            s.max_bytes = min(s.max_bytes, 4e9)
    return p


def generate_day(target: tuple[str, int] | str, start: datetime | int, duration_s: float, flows: int,
                 protocol: str = "v9", truth_path: str | Path | None = None,
                 active_dir: str | Path | None = None, speedup: float | None = None, seed: int = 1,
                 params: model.ModelParams | None = None, max_rate: float | None = 250_000,
                 progress: Callable[[int], None] | None = None, cfg=None,
                 counters_path: str | Path | None = None) -> dict:
    """Model `flows` flows over [start, start+duration), export them to target, write the
    truth (and ping, iperf3 and message-size sweep files under active_dir) and return the truth dict.

    counters_path: also write the routers' interface counters over the day there (JSON,
    if_counters.series at 5-minute polls: what the demo's SNMP agents serve).

    speedup None = as fast as max_rate (flows/s) allows; otherwise model time runs
    `speedup` times faster than wall time."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol {protocol!r}: choose one of {', '.join(PROTOCOLS)}")
    if isinstance(target, str):
        target = exporter.parse_target(target, 2055)
    start_ms = int(start.timestamp() * 1000) if isinstance(start, datetime) else int(start)
    duration_ms = int(duration_s * 1000)
    p = params or params_for(protocol, cfg)
    version = PROTOCOLS[protocol]
    t0 = time.perf_counter()
    f, events = model.generate(p, start_ms, duration_ms, flows, seed=seed, allow_v6=p.ipv6_fraction > 0)
    gen_s = time.perf_counter() - t0

    boot_ms = start_ms - ROUTER_UPTIME_MS
    streams, exp_rows, meta = [], [], []
    rev3 = None
    if version != 5 and any(r.record3 for r in p.routers):
        from . import record3  # noqa: PLC0415  (start-up: only revision-3 exports need it)

        rev3 = record3.draw(f, seed)
    for i, r in enumerate(p.routers):
        sub = f[f["router"] == i]
        ex = netflow.Exporter(version, i + 1, boot_ms if r.boot_ms is None else r.boot_ms, r.sampling_rate, r.address,
                              plan=r.sampling, reboot_at_ms=r.reboot_at_ms, swap_every=r.swap_times_every,
                              vlan_fields=model.VLAN_IES[r.vlan_ie] if version != 5 else (),
                              record3=rev3[f["router"] == i] if rev3 is not None and r.record3 else None)
        dgs = ex.datagrams(sub)
        streams.append((exporter.open_socket(r.address, target[0]), dgs))
        meta.append((sub, ex.flow_boot, ex.flow_swapped))
        c = truth_mod.counts(sub)
        scale = r.sampling_rate if (COLLECTOR_SCALES_SAMPLED[protocol] and r.sampling_rate > 1) else 1
        exp_rows.append({"name": r.name, "address": r.address, "domain_id": i + 1, "version": version,
                         "sampling_rate": r.sampling_rate, **c,
                         **truth_mod.sampled_counts(sub, ex.plan, ex.flow_sampler, ex.flow_rates),
                         "swapped_times": int(ex.flow_swapped.sum()), "reboot_at_ms": r.reboot_at_ms,
                         "flows_ipv6": int(sub["ipv6"].sum()), "datagrams": len(dgs),
                         "template_datagrams": sum(1 for d in dgs if d.flows == 0),
                         "collected_packets": c["packets"] * scale, "collected_bytes": c["bytes"] * scale,
                         "uplink_if": r.uplink_if, "uplink_bps": r.uplink_bps,
                         "lan_ifs": list(r.lan_ifs), "lan_bps": r.lan_bps})
    pack_s = time.perf_counter() - t0 - gen_s
    if counters_path is not None:
        from . import if_counters  # noqa: PLC0415  (start-up: only the demo serves counters)

        path = Path(counters_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(if_counters.series(f, p, start_ms, start_ms + duration_ms, rev3=rev3)))
    try:
        stats = exporter.send(streams, target, start_ms, speedup, max_rate, progress)
    finally:
        for s, _ in streams:
            s.close()

    doc = {
        "generator": "flowlake generate", "protocol": protocol, "netflow_version": version,
        "target": f"{target[0]}:{target[1]}", "seed": seed, "requested_flows": flows,
        "start_ms": start_ms, "end_ms": start_ms + duration_ms,
        "start": datetime.fromtimestamp(start_ms / 1000, timezone.utc).isoformat(),
        "duration_s": duration_ms / 1000, "speedup": speedup, "router_boot_ms": boot_ms,
        **truth_mod.summarize(f, p, exp_rows),
        "per_vlan": truth_mod.vlan_counts(f, p, version),
        "record3": truth_mod.record3_counts(f, p, rev3),
        "sampling": {
            "wire_counts_are_sampled": True,
            "announced_by": {"v5": "header sampling_interval (mode 01)",
                             "v9": "options template: SAMPLING_INTERVAL(34)+SAMPLING_ALGORITHM(35)",
                             "ipfix": "options template: samplingPacketInterval(305)+selectorAlgorithm(304)"}[protocol],
            "collector_scales_counts": COLLECTOR_SCALES_SAMPLED[protocol],
            "note": "records of a 1:N exporter describe the sampled packets; estimated traffic = counts * N",
        },
        "model": p.as_dict(), "events": events,
        "send": {"datagrams": stats.datagrams, "udp_payload_bytes": stats.bytes, "seconds": stats.seconds,
                 "flows_per_s": stats.flows_per_s, "generate_seconds": gen_s, "pack_seconds": pack_s,
                 "max_late_seconds": stats.max_late_s},
    }
    doc["collected_totals"] = {"flows": doc["totals"]["flows"],
                               "packets": sum(e["collected_packets"] for e in exp_rows),
                               "bytes": sum(e["collected_bytes"] for e in exp_rows)}
    if active_dir is not None:
        probes = ping.write_series(p, events, start_ms, duration_ms, Path(active_dir), seed)
        doc["ping"] = {"model": dataclasses.asdict(p.ping), "queueing": ping.__doc__.strip(),
                       "format": "iputils ping -D -c N", "dir": str(Path(active_dir) / "ping"), "probes": probes}
        doc["iperf3"] = {"format": "iperf3 -J (TCP, one stream)", "dir": str(Path(active_dir) / "iperf3"),
                         "tests": ping.write_throughput(p, events, start_ms, duration_ms, Path(active_dir), seed)}
        doc["sweep"] = {"format": "CSV: latency_ms against message_size_bytes", "dir": str(Path(active_dir) / "sweep"),
                        "paths": ping.write_sweeps(p, events, start_ms, duration_ms, Path(active_dir), seed)}
    if truth_path is not None:
        truth_mod.write(doc, truth_path)
    doc["_flows"] = f  # in-process callers (tests, demo) may compare records; never serialised
    doc["_record3"] = rev3  # revision-3 values per flow (record3.draw) when a router exports them
    doc["_exported"] = meta  # per router: its flows, the boot each was timed from, First/Last swapped
    return doc
