"""Benchmark: `flowlake import` of an nfdump archive tree into a local Kafka broker.

Builds a YYYY/MM/DD/nfcapd.YYYYMMDDhhmm tree of real nfcapd files (softflowd -> nfcapd,
then joined with `nfdump -R` so every file holds other flows), writes it in each
compression nfdump 1.7.1 has, and prints for each, in the same run on the same files:
  - `nfdump -R TREE -o pipe > /dev/null`   (the reference: nfdump decoding alone)
  - `flowlake-shipper import TREE`          (what `flowlake import` runs: walk + read +
                                             decode + sampling + flow digest + FlowBatch
                                             messages + Kafka, one transaction per file
                                             with its ledger record), once per message
                                             compression in --codecs
with flows/s, the ratio to nfdump, and the importer's peak RSS. A second, four times
larger tree shows the memory does not grow with the archive. One seed file is imported
first, untimed, to warm the broker up.

What is counted: CPU of the nfdump process, CPU of the importer process (all its
threads, from its rusage), and apart from both the local Kafka broker's CPU over the
import (its JVM's /proc stat). Not counted: the Python `flowlake import` front, which
only renders the importer's progress events (a few JSON lines per file), and the ingest.

    .venv/bin/python bench/import.py                       # 12 files x ~100k flows per tree
    .venv/bin/python bench/import.py --seed-flows 100000 --compressions none,lz4
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flowlake.base.ports import private_env

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
FLAGS = {"none": [], "lz4": ["-y"], "lzo": ["-z"], "bz2": ["-j"]}


def _ship_bench():
    """bench/ship.py's real-file helpers (softflowd -> nfcapd)."""
    spec = importlib.util.spec_from_file_location("bench_ship", Path(__file__).with_name("ship.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def flows_in(path: Path) -> int:
    info = subprocess.run(["nfdump", "-I", "-r", str(path)], capture_output=True, text=True, check=True).stdout
    return int(next(line.split(":")[1] for line in info.splitlines() if line.startswith("Flows:")))


def build_tree(seeds: list[Path], root: Path, flag: list[str], files: int) -> int:
    """`files` files of two seeds joined (each ordered pair is another flow sequence),
    one per 5 minutes over days. Returns the flows in the tree."""
    pairs = list(itertools.permutations(range(len(seeds)), 2))
    t0 = dt.datetime(2025, 1, 1)
    total = 0
    for i in range(files):
        a, b = pairs[i % len(pairs)]
        reps = 1 + i // len(pairs)  # beyond the pairs, repeat the second seed to stay distinct
        stamp = t0 + dt.timedelta(minutes=5 * i + 720 * (i % 4))
        target = root / stamp.strftime("%Y/%m/%d") / ("nfcapd." + stamp.strftime("%Y%m%d%H%M"))
        target.parent.mkdir(parents=True, exist_ok=True)
        parts = root.parent / f"parts-{root.name}-{i}"
        parts.mkdir()
        for k, src in enumerate([seeds[a]] + [seeds[b]] * reps):
            os.link(src, parts / f"nfcapd.20250101{k:04d}")
        subprocess.run(["nfdump", *flag, "-R", str(parts), "-w", str(target)], check=True, capture_output=True)
        shutil.rmtree(parts)
        total += flows_in(target)
    return total


def run_import(argv: list[str], env: dict):
    """Run the importer; return wall seconds, its summary event and its own rusage."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as errf:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errf, text=True, env=env)
        out = proc.stdout.read()
        _, status, ru = os.wait4(proc.pid, 0)  # this child's rusage (not the broker's, not nfdump's)
        secs = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            errf.seek(0)
            sys.exit(f"import failed:\n{errf.read()[-2000:]}")
    summary = next(json.loads(line) for line in out.splitlines() if '"summary"' in line)
    return secs, summary, ru


def broker_cpu(cfg) -> float:
    """CPU seconds the local Kafka broker has used so far (/proc/PID/stat utime+stime)."""
    from flowlake.collectors import kafka

    fields = Path(f"/proc/{kafka.managed(cfg).pid()}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed-flows", type=int, default=50_000, help="flows per softflowd seed file (4 seeds)")
    ap.add_argument("--files", type=int, default=12, help="files per tree")
    ap.add_argument("--compressions", default="none,lz4,lzo,bz2", help="trees to time, comma separated")
    ap.add_argument("--codecs", default="lz4,zstd",
                    help="FlowBatch message compressions to time (import.message_compression), comma separated")
    ap.add_argument("--cpuprofile", metavar="DIR", help="write the importer's Go CPU profile per tree here (go tool pprof)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="flowlake-bench-import-"))
    os.environ.update({**private_env(work / "home"), "FLOWLAKE_KAFKA_HEAP": "1g"})
    from flowlake import importer as archive
    from flowlake.base import config
    from flowlake.collectors import kafka, ship

    ship.build_binary()
    cfg = config.get()
    sb = _ship_bench()
    try:
        print(f"building 4 real seed files of ~{args.seed_flows:,} flows in {work} ...", flush=True)
        seeds = []
        for i in range(4):
            d = work / f"seed{i}"
            d.mkdir()
            seeds.append(sb.seed_file(d, args.seed_flows, seed=5 + i))
        print("starting Kafka ...", flush=True)
        kafka.start(cfg)
        # untimed warm-up: the broker's first transactions (topic creation, its JIT) cost
        # the first timed import a third of its wall time otherwise
        warm = work / "warmup"
        warm.mkdir()
        shutil.copy(seeds[0], warm / "nfcapd.202401010000")
        os.environ["FLOWLAKE_KAFKA_LEDGER_TOPIC"] = "bench.ledger.warmup"
        config.reset()
        run_import(archive.import_argv(config.get(), [warm]), archive.child_env(config.get()))
        rows = []
        for n, comp in enumerate(args.compressions.split(",")):
            for files in ([args.files, 4 * args.files] if n == 0 else [args.files]):
                tree = work / f"tree-{comp}-{files}"
                flows = build_tree(seeds, tree, FLAGS[comp], files)
                size = sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())
                t_nfdump = time.perf_counter()
                nf = subprocess.Popen(["nfdump", "-R", str(tree), "-o", "pipe"], stdout=subprocess.DEVNULL)
                _, _, nf_ru = os.wait4(nf.pid, 0)
                t_nfdump = time.perf_counter() - t_nfdump
                cpu_nfdump = nf_ru.ru_utime + nf_ru.ru_stime
                for codec in args.codecs.split(","):
                    broker0 = broker_cpu(cfg)
                    # a ledger of its own per run: the flow digests of another run must not skip these
                    topic = f"bench.ledger.{comp}.{files}.{codec}"
                    os.environ.update({"FLOWLAKE_KAFKA_LEDGER_TOPIC": topic, "FLOWLAKE_IMPORT_MESSAGE_COMPRESSION": codec})
                    config.reset()
                    env = archive.child_env(config.get())
                    argv = archive.import_argv(config.get(), [tree])
                    if args.cpuprofile:
                        Path(args.cpuprofile).mkdir(parents=True, exist_ok=True)
                        argv[2:2] = ["--cpuprofile", str(Path(args.cpuprofile).resolve() / f"import-{comp}-{files}-{codec}.pprof")]
                    secs, summary, ru = run_import(argv, env)
                    assert summary["flows"] == flows and summary["shipped"] == files, (summary, flows)
                    cpu_broker = broker_cpu(cfg) - broker0
                    rows.append((f"{comp}/{codec}", files, flows, size, t_nfdump, secs, ru.ru_maxrss, cpu_nfdump,
                                 ru.ru_utime + ru.ru_stime, cpu_broker))
        print()
        print("wall clock (what an operator waits for):")
        print(f"{'tree/codec':>10s} {'files':>5s} {'flows':>10s} {'B/flow':>6s} {'nfdump -o pipe/s':>17s} "
              f"{'import flows/s':>15s} {'ratio':>6s} {'importer peak RSS MB':>21s}")
        for comp, files, flows, size, t_nf, t_imp, rss, *_ in rows:
            print(f"{comp:>10s} {files:5d} {flows:10,d} {size / flows:6.0f} {flows / t_nf:17,.0f} "
                  f"{flows / t_imp:15,.0f} {t_nf / t_imp:6.2f} {rss / 1024:21.0f}")
        print("\nCPU time (what the machine pays; steady under the shared machine's load), CPU-s per M flows:")
        print(f"{'tree/codec':>10s} {'nfdump':>7s} {'importer':>9s} {'broker':>7s} "
              f"{'nfdump flows/CPU-s':>18s} {'import flows/CPU-s':>18s} {'ratio':>6s}")
        for comp, files, flows, size, t_nf, t_imp, rss, c_nf, c_imp, c_br in rows:
            m = flows / 1e6
            print(f"{comp:>10s} {c_nf / m:7.3f} {c_imp / m:9.3f} {c_br / m:7.3f} {flows / c_nf:18,.0f} "
                  f"{flows / c_imp:18,.0f} {c_nf / c_imp:6.2f}")
        print(f"\nload average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
              "(Kafka and the other users of the machine share them)")
        for codec in args.codecs.split(","):
            ratios = [r[7] / r[8] for r in rows if r[0].endswith("/" + codec)]
            print(f"goal 0.8x nfdump's decode per CPU-second, {codec}: {'met' if min(ratios) >= 0.8 else 'NOT met'} "
                  f"(ratios {min(ratios):.2f}-{max(ratios):.2f})")
        best = max(r[2] / r[5] for r in rows)
        print(f"target 400,000 flows/s imported (wall): {'met' if best >= 400_000 else 'NOT met'} "
              f"(best tree {best:,.0f}/s); importer memory bound GOMEMLIMIT={archive.child_env(cfg)['GOMEMLIMIT']}")
    finally:
        kafka.stop(cfg)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
