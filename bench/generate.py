"""Benchmark `flowlake generate`: export N flows (default 2M) to a local nfcapd, then count
what nfcapd wrote (`nfdump -I`) and report flows/s, loss and sequence failures.

Reference in the same process: the bare cost of sending the same datagrams with no
pacing to a socket nobody reads (the ceiling of Python's sendto loop here).

    .venv/bin/python bench/generate.py [--flows 2000000] [--protocol v9] [--max-rate 250000 400000 0]
"""
from __future__ import annotations

import argparse
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from flowlake.collectors.traffic import api, exporter, model, netflow


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nfdump_info(d: Path) -> dict:
    out = subprocess.run(["nfdump", "-R", str(d), "-I"], capture_output=True, text=True, check=True).stdout
    return {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in out.splitlines() if ":" in ln)}


def one_run(flows: int, protocol: str, max_rate: float | None, work: Path) -> dict:
    d = work / f"nfcapd-{protocol}-{int(max_rate or 0)}"
    d.mkdir()
    port = free_udp_port()
    proc = subprocess.Popen(["nfcapd", "-b", "127.0.0.1", "-p", str(port), "-w", str(d), "-t", "3600",
                             "-B", str(64 << 20), "-I", "bench"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        time.sleep(1.0)
        start = datetime(2026, 11, 20, tzinfo=timezone.utc)
        doc = api.generate_day(("127.0.0.1", port), start, 86400, flows, protocol, None,
                               speedup=None, seed=1, max_rate=max_rate)
        exporter.wait_drained(port, 60)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    info = nfdump_info(d)
    got = int(info["Flows"])
    return {"max_rate": max_rate, "sent": doc["totals"]["flows"], "received": got,
            "loss": 1 - got / doc["totals"]["flows"], "seq_failures": int(info["Sequence failures"]),
            "send_s": doc["send"]["seconds"], "flows_per_s": doc["send"]["flows_per_s"],
            "generate_s": doc["send"]["generate_seconds"], "pack_s": doc["send"]["pack_seconds"]}


def reference_sendto(flows: int, protocol: str) -> float:
    """Flows/s of a bare sendto loop over the same datagrams, unpaced, to an unread socket."""
    p = api.params_for(protocol)
    start = int(datetime(2026, 11, 20, tzinfo=timezone.utc).timestamp() * 1000)
    f, _ = model.generate(p, start, 86_400_000, flows, seed=1, allow_v6=p.ipv6_fraction > 0)
    ex = netflow.Exporter(api.PROTOCOLS[protocol], 1, start - 3_600_000)
    dgs = ex.datagrams(f)
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    addr = sink.getsockname()
    t = time.perf_counter()
    for d in dgs:
        try:
            s.sendto(d.payload, addr)
        except OSError:
            pass
    return flows / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, default=2_000_000)
    ap.add_argument("--protocol", default="v9", choices=list(api.PROTOCOLS))
    ap.add_argument("--max-rate", type=float, nargs="+", default=[250_000, 400_000],
                    help="flow-rate ceilings to try (0 = unpaced)")
    args = ap.parse_args()
    if shutil.which("nfcapd") is None:
        raise SystemExit("nfcapd is not installed (Debian package nfdump)")
    ref = reference_sendto(args.flows, args.protocol)
    print(f"reference: bare sendto loop, {args.protocol}, {args.flows} flows: {ref:,.0f} flows/s")
    with tempfile.TemporaryDirectory(prefix="flowlake-bench-") as tmp:
        for mr in args.max_rate:
            r = one_run(args.flows, args.protocol, mr or None, Path(tmp))
            print(f"max-rate {int(mr) or 'unpaced':>8}: sent {r['sent']:,} in {r['send_s']:.2f}s = "
                  f"{r['flows_per_s']:,.0f} flows/s ({r['flows_per_s'] / ref:.2f} x reference); "
                  f"nfcapd received {r['received']:,} (loss {r['loss']:.4%}, sequence failures "
                  f"{r['seq_failures']}); model {r['generate_s']:.2f}s, packing {r['pack_s']:.2f}s")


if __name__ == "__main__":
    main()
