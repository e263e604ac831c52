"""Benchmark: ship one nfcapd file of >= 2M flows into a local Kafka broker.

Prints flows/s for, on the same file in the same run:
  - `nfdump -r FILE -o pipe > /dev/null`  (the reference: nfdump decoding alone)
  - `flowlake-shipper stats FILE`          (our native reader alone)
  - `flowlake-shipper ship FILE`           (read + Avro + Kafka, acks=all, lz4, one transaction)
and the ratio of shipping to the nfdump decode.

The file is real: softflowd exports a generated pcap to nfcapd, and `nfdump -R` joins
copies of that file into one big nfcapd file (checked with `nfdump -I`).

    .venv/bin/python bench/ship.py                 # 2M flows, uncompressed file
    .venv/bin/python bench/ship.py --flows 3000000 --lz4
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


def big_file(work: Path, target: int, lz4: bool) -> tuple[Path, int]:
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
    cmd = ["nfdump", "-R", str(parts), "-w", str(big)]
    if lz4:
        cmd.insert(1, "-y")
    subprocess.run(cmd, check=True, capture_output=True)
    info = subprocess.run(["nfdump", "-I", "-r", str(big)], capture_output=True, text=True, check=True).stdout
    flows = int(next(line.split(":")[1] for line in info.splitlines() if line.startswith("Flows:")))
    return big, flows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, default=2_000_000, help="flows in the benchmark file (default 2M)")
    ap.add_argument("--lz4", action="store_true", help="write the file LZ4-compressed (nfcapd -y)")
    ap.add_argument("--shipper-args", default="", help="extra flowlake-shipper flags to try, e.g. '--batch-bytes 4194304'")
    ap.add_argument("--reference-binary", type=Path, default=None,
                    help="another flowlake-shipper build (e.g. main's) to ship the same file in the same run, "
                         "alternating with this one (3 rounds each), for a before/after ratio")
    args = ap.parse_args()

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
        big, flows = big_file(work, args.flows, args.lz4)
        size = big.stat().st_size
        print(f"file: {big.name}, {flows:,} flows (nfdump -I), {size / 1e6:.0f} MB, "
              f"{'lz4' if args.lz4 else 'uncompressed'}, {size / flows:.0f} bytes/flow")
        print("starting Kafka ...", flush=True)
        kafka.start(cfg)

        t_nfdump, _ = timed(["sh", "-c", f"nfdump -r {big} -o pipe > /dev/null"])
        t_read, res = timed([str(BINARY), "stats", str(big)])
        assert json.loads(res.stdout)["flows"] == flows, "our reader disagrees with nfdump -I"
        # the producer's first transaction on a fresh broker creates __transaction_state; warm it up
        small = work / "warm"
        small.mkdir()
        seed = next((work / "seed").iterdir())
        shutil.copy(seed, small / "nfcapd.202501010000")
        timed(ship.ship_argv(cfg, [small / "nfcapd.202501010000"]))
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t_ship, res = timed(ship.ship_argv(cfg, [big], extra=args.shipper_args.split()), env=ship.child_env(cfg))
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_ship = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        events = [json.loads(line) for line in res.stdout.splitlines()]
        shipped = next(e for e in events if e["event"] == "shipped")
        assert shipped["flows"] == flows
        t_txn = shipped["seconds"]

        rate = lambda t: flows / t  # noqa: E731
        print()
        print(f"{'stage':48s} {'seconds':>8s} {'flows/s':>12s}")
        print(f"{'nfdump -r FILE -o pipe > /dev/null (reference)':48s} {t_nfdump:8.2f} {rate(t_nfdump):12,.0f}")
        print(f"{'flowlake-shipper stats (native read only)':48s} {t_read:8.2f} {rate(t_read):12,.0f}")
        print(f"{'flowlake-shipper ship, whole process':48s} {t_ship:8.2f} {rate(t_ship):12,.0f}")
        print(f"{'flowlake-shipper ship, the file transaction':48s} {t_txn:8.2f} {rate(t_txn):12,.0f}")
        print(f"{'shipper CPU (user+sys) while shipping':48s} {cpu_ship:8.2f} {flows / cpu_ship:12,.0f} per CPU-second")
        print(f"load average during the run: {os.getloadavg()[0]:.1f} (the broker shares the same cores)")
        print()
        print(f"shipping vs nfdump decode alone: {rate(t_ship) / rate(t_nfdump):.2f}x "
              f"(transaction only {rate(t_txn) / rate(t_nfdump):.2f}x); native read vs nfdump: "
              f"{rate(t_read) / rate(t_nfdump):.2f}x")
        print(f"target 300,000 flows/s shipped: {'met' if rate(t_ship) >= 300_000 else 'NOT met'}")
        if args.reference_binary:
            compare(cfg, ship, big, flows, args.reference_binary)
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
