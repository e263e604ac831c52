"""Benchmark: what deciding every flow's sampling rate costs (issue 20).

A sampled IPFIX router (two samplers announced as Cisco does, selectorId 302 +
samplingSize 309 / samplingPopulation 310, one rate change) exports --flows flows to a
real nfcapd with the sampling tap reading the same port. Prints, in the same run:
  - CPU seconds per million flows of the tap, beside nfcapd's own (the reference);
  - the tap's disk use per flow (fingerprints) and per rate change;
  - `flowlake-shipper dump` flows/s over nfcapd's file with and without resolution
    (the shipper's added cost per flow), and `nfdump -o pipe` on the same file.

    .venv/bin/python bench/sampling.py               # 300k flows
    .venv/bin/python bench/sampling.py --flows 1000000
"""
from __future__ import annotations

import argparse
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from flowlake.base.ports import free_port

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime in clock ticks


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, default=300_000)
    args = ap.parse_args()
    from flowlake.base.gobuild import SHIPPER
    from flowlake.collectors.traffic import api, exporter, model
    from flowlake.collectors.traffic.sampling import Sampler, SamplingPlan

    binary = str(SHIPPER.build())
    start = datetime(2026, 11, 20, tzinfo=timezone.utc)
    t0 = int(start.timestamp() * 1000)
    p = api.params_for("ipfix")
    p.bulk, p.scanners, p.fanin, p.teleimmersion = [], [], [], []
    p.routers = [model.Router("sampled", "127.0.0.120", 1.0, sampling=SamplingPlan(
        "ipfix-302-309-310", [Sampler(1, 1000), Sampler(2, 250)], change_at_ms=t0 + 1_800_000, change_sampler=1,
        change_rate=500))]
    work = Path(tempfile.mkdtemp(prefix="bench-sampling-"))
    try:
        port = free_port(socket.SOCK_DGRAM)
        spool, tap_dir = work / "spool", work / "tap"
        spool.mkdir()
        tap = subprocess.Popen([binary, "tap", "--port", str(port), "--dir", str(tap_dir)],
                               stdout=open(work / "tap.log", "w"), stderr=subprocess.STDOUT)
        nfcapd = subprocess.Popen(["nfcapd", "-b", "127.0.0.1", "-p", str(port), "-w", str(spool), "-t", "3600",
                                   "-B", str(8 << 20)], stdout=open(work / "nfcapd.log", "w"), stderr=subprocess.STDOUT)
        while not (tap_dir / "tap.json").exists():
            time.sleep(0.05)
        time.sleep(0.5)
        cpu0 = cpu_seconds(tap.pid), cpu_seconds(nfcapd.pid)
        doc = api.generate_day(("127.0.0.1", port), start, 3600, args.flows, "ipfix", params=p, seed=1,
                               max_rate=100_000)
        exporter.wait_drained(port, timeout=120)
        time.sleep(1.5)  # the tap flushes its fingerprints every second
        tap_cpu, nf_cpu = cpu_seconds(tap.pid) - cpu0[0], cpu_seconds(nfcapd.pid) - cpu0[1]
        for proc in (nfcapd, tap):
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        files = sorted(q for q in spool.glob("nfcapd.*") if ".current." not in q.name)
        flows = doc["totals"]["flows"]
        fp_bytes = sum(q.stat().st_size for q in (tap_dir / "fp").glob("*.bin"))
        rates_lines = len((tap_dir / "rates.jsonl").read_text().splitlines())
        print(f"{flows:,} IPFIX flows sent in {doc['send']['seconds']:.1f} s ({doc['send']['flows_per_s']:,.0f} flows/s), "
              f"two samplers, one rate change")
        print(f"tap CPU {tap_cpu:.2f} s = {tap_cpu / flows * 1e6:.2f} CPU-s per million flows; "
              f"nfcapd (reference, same datagrams) {nf_cpu:.2f} s = {nf_cpu / flows * 1e6:.2f}; "
              f"ratio tap/nfcapd {tap_cpu / max(nf_cpu, 0.01):.2f}")
        print(f"tap disk: {fp_bytes / flows:.1f} bytes per sampled flow (fingerprints, kept [sampling] keep_minutes), "
              f"rates.jsonl {rates_lines} lines (one per rate change)")
        plain = sum(timed([binary, "dump", str(f)]) for f in files)
        resolved = sum(timed([binary, "dump", "--tap-dir", str(tap_dir), str(f)]) for f in files)
        ref = sum(timed(["nfdump", "-r", str(f), "-o", "pipe"]) for f in files)
        print(f"shipper dump without resolution {flows / plain:,.0f} flows/s, with resolution {flows / resolved:,.0f} "
              f"flows/s (x{resolved / plain:.2f} time); nfdump -o pipe {flows / ref:,.0f} flows/s (reference)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
