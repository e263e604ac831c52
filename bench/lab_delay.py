"""What the lab's delay line (collectors/lab/delay.py: NFQUEUE + a userspace timer, since
this kernel has no netem) costs and how exactly it delays: one path of the lab topology
with no delay (the reference, same run) and with `--delay` ms each way; per case, ping -U
RTT p50/p99/max (user to user: ping's kernel stamps would miss the client side's half),
the excess over 2 x delay, an iperf3 TCP transfer's throughput through a `--rate` tbf,
and the delay lines' CPU-seconds per thousand packets they released during it (GSO
packets count once: the kernel queues them whole). Needs root.

    .venv/bin/python bench/lab_delay.py [--delay 20] [--rate 200mbit] [--seconds 4]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess

from flowlake.collectors.lab import metrics
from flowlake.collectors.lab.netns import Namespaces, in_ns
from flowlake.collectors.lab.spec import parse
from flowlake.collectors.lab.topology import Topology


def cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def queued(topo: Topology) -> int:
    """Packets the NFQUEUE rules handed to the delay lines (iptables counters)."""
    n = 0
    for ns in (topo.client, topo.server):
        out = subprocess.run(in_ns(ns, "iptables", "-t", "mangle", "-L", "PREROUTING", "-v", "-x", "-n"),
                             capture_output=True, text=True).stdout
        n += sum(int(line.split()[0]) for line in out.splitlines() if "NFQUEUE" in line)
    return n


def case(delay_ms: float, rate: str, seconds: float) -> dict:
    spec = parse({"study": "bench", "topology": {"paths": {"a": {"rate": rate, "queue_ms": 100,
                                                                 "delay_ms": delay_ms}}},
                  "grid": [{"kind": "bulk"}]}, "bench")
    lab = Namespaces("fl-bench")
    topo = Topology(spec, lab)
    try:
        topo.build()
        server = topo.server_addr("a")
        ping = subprocess.run(in_ns(topo.client, "ping", "-U", "-n", "-i", "0.005", "-c", "400", server),
                              capture_output=True, text=True, timeout=120).stdout
        rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", ping)]
        srv = lab.spawn(topo.server, "iperf3", "-s", "-1")
        subprocess.run(in_ns(topo.client, "sleep", "0.4"))
        t0, n0 = sum(cpu_s(p.pid) for p in topo.delay_lines), queued(topo)
        res = subprocess.run(in_ns(topo.client, "iperf3", "-c", server, "-t", int(seconds), "-w", "8M", "-J"),
                             capture_output=True, text=True, timeout=seconds * 4 + 30)
        lab.stop(srv)
        cpu = sum(cpu_s(p.pid) for p in topo.delay_lines) - t0
        doc = json.loads(res.stdout)
        return {"delay_ms": delay_ms, "rtt_p50": metrics.quantile(rtts, 0.5), "rtt_p99": metrics.quantile(rtts, 0.99),
                "rtt_max": max(rtts), "throughput": doc["end"]["sum_received"]["bits_per_second"],
                "packets": queued(topo) - n0, "cpu_s": cpu}
    finally:
        lab.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delay", type=float, default=20.0)
    ap.add_argument("--rate", default="200mbit")
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    print(f"load {open('/proc/loadavg').read().split()[0]} on {os.cpu_count()} cores; tbf {args.rate}")
    print(f"{'delay ms':>9} {'rtt p50':>8} {'rtt p99':>8} {'rtt max':>8} {'excess p50':>11} {'Mbit/s':>8} "
          f"{'packets':>9} {'CPU-s/1k pkts':>14}")
    ref = None
    for d in (0.0, args.delay):
        r = case(d, args.rate, args.seconds)
        ref = ref or r
        per_k = r["cpu_s"] / r["packets"] * 1000 if r["packets"] else 0.0
        print(f"{d:>9g} {r['rtt_p50']:>8.2f} {r['rtt_p99']:>8.2f} {r['rtt_max']:>8.2f} "
              f"{r['rtt_p50'] - 2 * d:>11.2f} {r['throughput'] / 1e6:>8.1f} {r['packets']:>9} {per_k:>14.4f}")
    print(f"throughput with the delay line / without: {r['throughput'] / ref['throughput']:.2f}")


if __name__ == "__main__":
    main()
