"""Synthetic PingER-style results whose RTT and loss follow the bulk transfers.

Queueing model (stated in the truth file): each target's path has a bottleneck of
capacity C. Utilisation rho(t) = background_util * load(t)/load_max + sum of active
bulk rates on that path / C (capped at rho_max). With S = packet_bytes*8/C:
  queueing delay per packet: 0 with probability 1-rho, else Exp(mean S/(1-rho))
  (M/M/1 waiting time, mean S*rho/(1-rho)),
  loss per packet: M/M/1/K blocking (1-rho) rho^K / (1-rho^(K+1)).
Output is byte-for-byte the iputils `ping -D -c N TARGET` format (checked against
ping on this machine): -D puts the receive time in front of each reply.

Message-size sweeps (CSV) time one message of each size along the same paths, as from
mirrors of the same data: size*8 bits at the capacity left, C * (1 - rho), plus half the
base RTT and the mean queueing delay.

Throughput tests (iperf3 -J, one TCP stream) see the same paths: the stream gets a share
tcp_efficiency of the capacity left, C * (1 - rho), its RTT is the base RTT plus the mean
queueing delay, and its retransmits are the M/M/1/K loss of the packets it sends. Their
own packets are not in the NetFlow model.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .model import ModelParams, diurnal_weight


def utilisation(params: ModelParams, target_index: int, t_ms: float, events: list[dict]) -> float:
    pm = params.ping
    tgt = pm.targets[target_index]
    hours = (t_ms / 1000.0 % 86400) / 3600.0
    bg = pm.background_util * float(diurnal_weight(np.array([hours]), params)[0]) / (1 + params.diurnal_amplitude)
    bulk = sum(e["rate_bps"] for e in events
               if e["kind"] == "bulk" and e["ping_target"] == tgt.address and e["start_ms"] <= t_ms < e["end_ms"])
    return min(pm.rho_max, bg + bulk / tgt.bottleneck_bps)


def mm1k_loss(rho: float, k: int) -> float:
    if abs(rho - 1.0) < 1e-12:
        return 1.0 / (k + 1)
    return (1 - rho) * rho ** k / (1 - rho ** (k + 1))


def mean_wait_ms(rho: float, service_s: float) -> float:
    return service_s * rho / (1 - rho) * 1000.0


def _rtt_text(ms: float) -> str:
    """iputils: >=100 ms no decimals, >=10 one, >=1 two, else three."""
    us = int(round(ms * 1000))
    if us >= 100000 - 50:
        return f"{(us + 500) // 1000}"
    if us >= 10000 - 5:
        return f"{(us + 50) // 1000}.{((us + 50) % 1000) // 100}"
    if us >= 1000:
        return f"{(us + 5) // 1000}.{((us + 5) % 1000) // 10:02d}"
    return f"{us // 1000}.{us % 1000:03d}"


def format_ping(target: str, send_ms: int, rtts: list[float | None], ttl: int = 52, source: str = "") -> str:
    """One `ping -D -c N target` run: rtts[i] is the RTT in ms or None for a loss. With a
    source, `ping -I SOURCE -D -c N target` (a PingER monitor pings from its own address:
    iputils then names it in the header, as on this machine: "... from 10.0.0.10 : 56(84)")."""
    via = f" from {source} :" if source else ""
    lines = [f"PING {target} ({target}){via} 56(84) bytes of data."]
    for seq, rtt in enumerate(rtts, 1):
        if rtt is None:
            continue
        t = (send_ms + (seq - 1) * 1000) / 1000.0 + rtt / 1000.0
        lines.append(f"[{t:.6f}] 64 bytes from {target}: icmp_seq={seq} ttl={ttl} time={_rtt_text(rtt)} ms")
    got = [r for r in rtts if r is not None]
    n = len(rtts)
    loss = (n - len(got)) * 100.0 / n
    elapsed = int((n - 1) * 1000 + (got[-1] if got and rtts[-1] is not None else 0))
    lines += ["", f"--- {target} ping statistics ---",
              f"{n} packets transmitted, {len(got)} received, {loss:g}% packet loss, time {elapsed}ms"]
    if got:
        a = np.array(got)
        mdev = math.sqrt(max(0.0, float((a ** 2).mean() - a.mean() ** 2)))
        lines.append(f"rtt min/avg/max/mdev = {a.min():.3f}/{a.mean():.3f}/{a.max():.3f}/{mdev:.3f} ms")
    return "\n".join(lines) + "\n"


def _schedule(params: ModelParams, events: list[dict], out_dir: Path, times: range):
    """Per target, then per time: (target, its directory, packet service time at its
    bottleneck, time ms, utilisation rho, UTC stamp for the file name)."""
    pm = params.ping
    for ti, tgt in enumerate(pm.targets):
        d = out_dir / tgt.address
        d.mkdir(parents=True, exist_ok=True)
        service = pm.packet_bytes * 8 / tgt.bottleneck_bps
        for t in times:
            stamp = np.datetime64(t, "ms").astype("datetime64[s]").item().strftime("%Y%m%dT%H%M%SZ")
            yield tgt, d, service, t, utilisation(params, ti, t, events), stamp


def write_series(params: ModelParams, events: list[dict], start_ms: int, duration_ms: int,
                 out_dir: Path, seed: int = 1) -> list[dict]:
    """Write one file per target per probe time under out_dir/ping/<target>/ and return
    the per-probe truth (utilisation, expected delay and loss, measured summary)."""
    pm = params.ping
    rng = np.random.default_rng(seed + 7919)
    step = int(pm.interval_minutes * 60_000)
    rows = []
    for tgt, d, service, t, rho, stamp in _schedule(params, events, Path(out_dir) / "ping",
                                                    range(start_ms, start_ms + duration_ms, step)):
        p_loss = mm1k_loss(rho, pm.buffer_packets)
        rtts: list[float | None] = []
        for _ in range(pm.count):
            if rng.random() < p_loss:
                rtts.append(None)
                continue
            wait = rng.exponential(service / (1 - rho)) * 1000 if rng.random() < rho else 0.0
            rtts.append(max(0.01, tgt.base_rtt_ms + wait + abs(rng.normal(0, pm.jitter_ms))))
        path = d / f"ping-{stamp}.txt"
        path.write_text(format_ping(tgt.address, t, rtts, source=pm.probe_address))
        got = [r for r in rtts if r is not None]
        rows.append({"target": tgt.address, "time_ms": t, "file": str(path), "utilisation": rho,
                     "expected_extra_delay_ms": mean_wait_ms(rho, service), "expected_loss": p_loss,
                     "sent": len(rtts), "received": len(got),
                     "avg_rtt_ms": float(np.mean(got)) if got else None})
    return rows


def format_iperf3(source: str, target: str, start_ms: int, seconds: int, bps: float, retransmits: int,
                  rtt_ms: float, mss: int = 1448) -> str:
    """One `iperf3 -J -c TARGET -t SECONDS` TCP result: the fields iperf3 writes that the
    importer reads (per-second intervals at the stream's rate)."""
    total = int(bps * seconds / 8)
    rtt_us = int(round(rtt_ms * 1000))
    interval = {"sum": {"start": 0, "end": 1, "seconds": 1, "bytes": total // seconds, "bits_per_second": bps,
                        "retransmits": 0, "sender": True}}
    doc = {
        "start": {"connected": [{"socket": 5, "local_host": source, "local_port": 40000,
                                 "remote_host": target, "remote_port": 5201}],
                  "version": "iperf 3.12", "timestamp": {"time": "", "timesecs": start_ms // 1000},
                  "connecting_to": {"host": target, "port": 5201}, "tcp_mss_default": mss,
                  "sock_bufsize": 0, "sndbuf_actual": 16384, "rcvbuf_actual": 131072,
                  "test_start": {"protocol": "TCP", "num_streams": 1, "blksize": 131072, "omit": 0,
                                 "duration": seconds, "bytes": 0, "blocks": 0, "reverse": 0, "tos": 0,
                                 "target_bitrate": 0}},
        "intervals": [{"streams": [], "sum": {**interval["sum"], "start": i, "end": i + 1}} for i in range(seconds)],
        "end": {"streams": [{"sender": {"socket": 5, "start": 0, "end": seconds, "seconds": seconds, "bytes": total,
                                        "bits_per_second": bps, "retransmits": retransmits,
                                        "max_snd_cwnd": int(bps * rtt_ms / 8000), "max_rtt": rtt_us,
                                        "min_rtt": rtt_us, "mean_rtt": rtt_us, "sender": True}}],
                "sum_sent": {"start": 0, "end": seconds, "seconds": seconds, "bytes": total,
                             "bits_per_second": bps, "retransmits": retransmits, "sender": True},
                "sum_received": {"start": 0, "end": seconds, "seconds": seconds, "bytes": total,
                                 "bits_per_second": bps, "sender": True},
                "cpu_utilization_percent": {"host_total": 1.0, "remote_total": 0.5},
                "sender_tcp_congestion": "cubic", "receiver_tcp_congestion": "cubic"},
    }
    return json.dumps(doc, indent=1) + "\n"


def write_throughput(params: ModelParams, events: list[dict], start_ms: int, duration_ms: int,
                     out_dir: Path, seed: int = 1) -> list[dict]:
    """Write one iperf3 -J file per target per test time under out_dir/iperf3/<target>/
    and return the per-test truth (utilisation, capacity left, measured rate)."""
    pm = params.ping
    rng = np.random.default_rng(seed + 104729)
    step = int(pm.throughput_interval_minutes * 60_000)
    rows = []
    for tgt, d, service, t, rho, stamp in _schedule(params, events, Path(out_dir) / "iperf3",  # off the ping grid
                                                    range(start_ms + step // 2, start_ms + duration_ms, step)):
        left = tgt.bottleneck_bps * (1 - rho)
        bps = left * float(np.clip(rng.normal(pm.tcp_efficiency, 0.03), 0.5, 0.99))
        packets = int(bps * pm.throughput_seconds / 8 / 1448)
        retransmits = int(rng.poisson(mm1k_loss(rho, pm.buffer_packets) * packets))
        rtt = tgt.base_rtt_ms + mean_wait_ms(rho, service)
        path = d / f"iperf3-{stamp}.json"
        path.write_text(format_iperf3(pm.probe_address, tgt.address, t, pm.throughput_seconds, bps,
                                      retransmits, rtt))
        rows.append({"target": tgt.address, "time_ms": t, "file": str(path), "utilisation": rho,
                     "capacity_left_bps": left, "throughput_bps": bps, "retransmits": retransmits})
    return rows


def write_sweeps(params: ModelParams, events: list[dict], start_ms: int, duration_ms: int,
                 out_dir: Path, seed: int = 1) -> list[dict]:
    """Write one message-size sweep CSV per target under out_dir/sweep/<target>/ (at
    sweep_hour of a day's run, half-way through a shorter one) and return each path's
    truth: latency_ms = a * size + l."""
    pm = params.ping
    rng = np.random.default_rng(seed + 15485863)
    t_sweep = start_ms + min(pm.sweep_hour * 3_600_000, duration_ms // 2)
    rows = []
    for tgt, d, service, t, rho, stamp in _schedule(params, events, Path(out_dir) / "sweep",
                                                    range(t_sweep, t_sweep + 1)):
        path_label = f"{pm.probe_address}>{tgt.address}"
        a = 8 / (tgt.bottleneck_bps * (1 - rho)) * 1000  # ms per byte at the capacity left
        l_ms = tgt.base_rtt_ms / 2 + mean_wait_ms(rho, service)
        lines = ["source,destination,path,start,test,message_size_bytes,latency_ms"]
        for i, size in enumerate(s for s in pm.sweep_sizes for _ in range(pm.sweep_repeats)):
            latency = (a * size + l_ms) * (1 + rng.normal(0, pm.sweep_noise))
            when = np.datetime64(t + 2_000 * i, "ms").astype(str) + "Z"
            lines.append(f"{pm.probe_address},{tgt.address},{path_label},{when},message_size,{size},{latency:.4f}")
        file = d / f"sweep-{stamp}.csv"
        file.write_text("\n".join(lines) + "\n")
        rows.append({"path": path_label, "time_ms": t, "file": str(file), "utilisation": rho,
                     "a_ms_per_byte": a, "l_ms": l_ms})
    return rows
