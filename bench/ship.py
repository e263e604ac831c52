"""Benchmark: ship one nfcapd file of >= 2M flows into a local Kafka broker.

Prints flows/s for, on the same file in the same run:
  - `nfdump -r FILE -o pipe > /dev/null`  (the reference: nfdump decoding alone)
  - `flowlake-shipper stats FILE`          (our native reader alone)
  - `flowlake-shipper ship FILE`           (read + Avro + Kafka, acks=all, lz4, one transaction)
and the ratio of shipping to the nfdump decode; for each spool compression asked for
(`--compression both`, the default: the same flows as an uncompressed and an LZ4 file, as
nfcapd writes with collector.spool_compression "none" and "lz4"), the file's bytes per flow
and the shipper's CPU per flow, then the two side by side.

The file is real: softflowd exports a generated pcap to nfcapd, and `nfdump -R` joins
copies of that file into one big nfcapd file (checked with `nfdump -I`); the LZ4 file is
that file rewritten by `nfdump -y` (the same flows, the same order).

    .venv/bin/python bench/ship.py                 # 2M flows, uncompressed and LZ4
    .venv/bin/python bench/ship.py --flows 3000000 --compression lz4
    .venv/bin/python bench/ship.py --reference-binary /tmp/shipper-main   # an older build, same file, same run
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flowlake.base.ports import free_port

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


def timed(argv, **kw) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, **kw)
    dt = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv[:3]))} ... failed:\n{res.stderr[-2000:]}")
    return dt, res


def seed_file(work: Path, flows: int, seed: int = 5) -> Path:
    """A real nfcapd file from softflowd (NetFlow v9) reading a generated pcap."""
    import nfcapd_capture
    import pcapgen

    pcap = work / "seed.pcap"
    pcapgen.write_pcap(pcap, flows, seed=seed, ipv6_share=0.2)

    def feed(port: int) -> None:
        subprocess.run(["softflowd", "-r", str(pcap), "-n", f"127.0.0.1:{port}", "-v", "9", "-m", str(flows * 2)],
                       check=True, capture_output=True)
        time.sleep(0.5)

    return nfcapd_capture.capture(work / "seed", feed, ["-B", "16777216"])[0]


def big_file(work: Path, target: int) -> tuple[Path, int]:
    seed = seed_file(work, 25000)
    per = int(json.loads(subprocess.run([str(BINARY), "stats", str(seed)], capture_output=True, text=True,
                                        check=True).stdout)["flows"])
    copies = math.ceil(target / per)
    parts = work / "parts"
    parts.mkdir()
    t0 = dt.datetime(2026, 1, 1)
    for i in range(copies):  # hard links: the same flows, one file name per minute
        os.link(seed, parts / ("nfcapd." + (t0 + dt.timedelta(minutes=i)).strftime("%Y%m%d%H%M")))
    big = work / "nfcapd.202601010000"
    subprocess.run(["nfdump", "-R", str(parts), "-w", str(big)], check=True, capture_output=True)
    return big, nfdump_flows(big)


def nfdump_flows(path: Path) -> int:
    info = subprocess.run(["nfdump", "-I", "-r", str(path)], capture_output=True, text=True, check=True).stdout
    return int(next(line.split(":")[1] for line in info.splitlines() if line.startswith("Flows:")))


def lz4_copy(big: Path, flows: int) -> Path:
    """The same flows as nfcapd -y writes them (collector.spool_compression = "lz4")."""
    out = big.with_name("nfcapd.202601020000")  # another ledger key than the plain file's
    subprocess.run(["nfdump", "-r", str(big), "-y", "-w", str(out)], check=True, capture_output=True)
    head = subprocess.run(["nfdump", "-v", str(out)], capture_output=True, text=True, check=True).stdout
    assert "lz4 compressed" in head, head
    assert nfdump_flows(out) == flows, "nfdump -y changed the flow count"
    return out


def measure(cfg, ship, path: Path, flows: int, shipper_args: str) -> dict:
    """One file: nfdump's decode, our native read, the ship (wall and the shipper's CPU)."""
    t_nfdump, _ = timed(["sh", "-c", f"nfdump -r {path} -o pipe > /dev/null"])
    t_read, res = timed([str(BINARY), "stats", str(path)])
    assert json.loads(res.stdout)["flows"] == flows, "our reader disagrees with nfdump -I"
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t_ship, res = timed(ship.ship_argv(cfg, [path], extra=shipper_args.split()), env=ship.child_env(cfg))
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_ship = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    events = [json.loads(line) for line in res.stdout.splitlines()]
    shipped = next(e for e in events if e["event"] == "shipped")
    assert shipped["flows"] == flows
    return {"size": path.stat().st_size, "nfdump": t_nfdump, "read": t_read, "ship": t_ship,
            "txn": shipped["seconds"], "cpu": cpu_ship}


def report(name: str, m: dict, flows: int) -> None:
    rate = lambda t: flows / t  # noqa: E731
    print()
    print(f"== {name}: {m['size'] / 1e6:.0f} MB, {m['size'] / flows:.1f} bytes/flow in the spool")
    print(f"{'stage':48s} {'seconds':>8s} {'flows/s':>12s}")
    print(f"{'nfdump -r FILE -o pipe > /dev/null (reference)':48s} {m['nfdump']:8.2f} {rate(m['nfdump']):12,.0f}")
    print(f"{'flowlake-shipper stats (native read only)':48s} {m['read']:8.2f} {rate(m['read']):12,.0f}")
    print(f"{'flowlake-shipper ship, whole process':48s} {m['ship']:8.2f} {rate(m['ship']):12,.0f}")
    print(f"{'flowlake-shipper ship, the file transaction':48s} {m['txn']:8.2f} {rate(m['txn']):12,.0f}")
    print(f"{'shipper CPU (user+sys) while shipping':48s} {m['cpu']:8.2f} {flows / m['cpu']:12,.0f} per CPU-second"
          f" ({m['cpu'] / flows * 1e6:.2f} CPU-s per million flows)")
    print(f"shipping vs nfdump decode alone: {rate(m['ship']) / rate(m['nfdump']):.2f}x "
          f"(transaction only {rate(m['txn']) / rate(m['nfdump']):.2f}x); native read vs nfdump: "
          f"{rate(m['read']) / rate(m['nfdump']):.2f}x")
    print(f"target 300,000 flows/s shipped: {'met' if rate(m['ship']) >= 300_000 else 'NOT met'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, default=2_000_000, help="flows in the benchmark file (default 2M)")
    ap.add_argument("--compression", choices=("none", "lz4", "both"), default="both",
                    help="the spool file(s) to ship: uncompressed, LZ4 (nfcapd -y), or both in the same run (default)")
    ap.add_argument("--lz4", action="store_true", help="the same as --compression lz4")
    ap.add_argument("--shipper-args", default="", help="extra flowlake-shipper flags to try, e.g. '--batch-bytes 4194304'")
    ap.add_argument("--reference-binary", type=Path, default=None,
                    help="another flowlake-shipper build (e.g. main's) to ship the same file in the same run, "
                         "alternating with this one (3 rounds each), for a before/after ratio")
    args = ap.parse_args()
    kinds = ["none", "lz4"] if args.compression == "both" and not args.lz4 else \
        ["lz4"] if args.lz4 else [args.compression]

    work = Path(tempfile.mkdtemp(prefix="flowlake-bench-ship-"))
    os.environ.update({
        "FLOWLAKE_HOME": str(work / "home"),
        "FLOWLAKE_KAFKA_PORT": str(free_port()),
        "FLOWLAKE_KAFKA_CONTROLLER_PORT": str(free_port()),
        "FLOWLAKE_KAFKA_HEAP": "1g",
    })
    from flowlake.base import config
    from flowlake.collectors import kafka, ship

    global BINARY
    BINARY = ship.build_binary()
    cfg = config.get()
    try:
        print(f"building a >= {args.flows:,}-flow nfcapd file in {work} ...", flush=True)
        plain, flows = big_file(work, args.flows)
        files = {"none": plain}
        if "lz4" in kinds:
            files["lz4"] = lz4_copy(plain, flows)
        files = {k: files[k] for k in kinds}
        for kind, path in files.items():
            print(f"file: {path.name}, {flows:,} flows (nfdump -I), {path.stat().st_size / 1e6:.0f} MB, "
                  f"{'uncompressed' if kind == 'none' else kind}, {path.stat().st_size / flows:.1f} bytes/flow")
        print("starting Kafka ...", flush=True)
        kafka.start(cfg)

        # the producer's first transaction on a fresh broker creates __transaction_state; warm it up
        small = work / "warm"
        small.mkdir()
        seed = next((work / "seed").iterdir())
        shutil.copy(seed, small / "nfcapd.202501010000")
        timed(ship.ship_argv(cfg, [small / "nfcapd.202501010000"]))
        results = {kind: measure(cfg, ship, path, flows, args.shipper_args) for kind, path in files.items()}
        for kind, m in results.items():
            report("uncompressed spool file" if kind == "none" else f"{kind} spool file (nfcapd -y)", m, flows)
        print(f"load average during the run: {os.getloadavg()[0]:.1f} (the broker shares the same cores)")
        if len(results) == 2:
            a, b = results["none"], results["lz4"]
            print()
            print(f"{'spool':14s} {'bytes/flow':>10s} {'ship flows/s':>13s} {'CPU-s/M flows':>14s} {'read flows/s':>13s}")
            for kind, m in results.items():
                print(f"{kind:14s} {m['size'] / flows:10.1f} {flows / m['ship']:13,.0f} {m['cpu'] / flows * 1e6:14.2f} "
                      f"{flows / m['read']:13,.0f}")
            print(f"lz4 / none: {b['size'] / a['size']:.2f}x the bytes, {a['ship'] / b['ship']:.2f}x the ship rate, "
                  f"{b['cpu'] / a['cpu']:.2f}x the shipper's CPU per flow")
        if args.reference_binary:
            for kind, path in files.items():
                print(f"\n-- {kind} file --")
                compare(cfg, ship, path, flows, args.reference_binary)
    finally:
        kafka.stop(cfg)
        shutil.rmtree(work, ignore_errors=True)


def compare(cfg, ship, big: Path, flows: int, reference: Path, rounds: int = 3) -> None:
    """Ship the same file with this build and a reference build in turns (--force: the ledger
    already has it); print each one's median flows/s of the file transaction and the ratio."""
    import statistics

    def once(binary: Path) -> float:
        argv = ship.ship_argv(cfg, [big], force=True)
        argv[0] = str(binary)
        _, res = timed(argv, env=ship.child_env(cfg))
        shipped = next(e for e in map(json.loads, res.stdout.splitlines()) if e["event"] == "shipped")
        assert shipped["flows"] == flows
        return flows / shipped["seconds"]

    ours, ref = [], []
    for _ in range(rounds):
        ref.append(once(reference))
        ours.append(once(BINARY))
    print()
    print(f"this build  ({BINARY}): {statistics.median(ours):12,.0f} flows/s median of {rounds} "
          f"({min(ours):,.0f}-{max(ours):,.0f})")
    print(f"reference   ({reference}): {statistics.median(ref):12,.0f} flows/s median of {rounds} "
          f"({min(ref):,.0f}-{max(ref):,.0f})")
    print(f"this build / reference: {statistics.median(ours) / statistics.median(ref):.2f}x")


BINARY: Path

if __name__ == "__main__":
    main()
