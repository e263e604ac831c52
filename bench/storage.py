"""Storage of the demo day: bytes per flow in the lake before and after hour close
(compaction), beside nfcapd's own files of the same flows compressed with LZ4 (`nfdump -y`),
and the scan speed of `flowlake query` (whole command) before and after.

The day goes the demo's way: the traffic model exports it as IPFIX to a real nfcapd, the
shipper ships it through Kafka and the Spark ingest lands it, under a scratch
FLOWLAKE_HOME. Prints figures, asserts nothing.

    .venv/bin/python bench/storage.py                      # 1M flows, the demo's default
    .venv/bin/python bench/storage.py --flows 200000
    .venv/bin/python bench/storage.py --home DIR --keep    # reuse/keep a scratch home
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DAY = "2026-11-20"
QUERIES = ["any", "proto tcp and dst port 443"]


def build_day(cfg, flows: int) -> None:
    from flowlake import demo, stack
    from flowlake.collectors.traffic import api as traffic

    stack.up_stack(cfg, with_superset=False)
    try:
        traffic.generate_day(target=("127.0.0.1", cfg.collector.port),
                             start=dt.datetime.fromisoformat(DAY).replace(tzinfo=dt.timezone.utc),
                             duration_s=86400, flows=flows, protocol="ipfix", seed=1, cfg=cfg)
        got = demo.wait_for_lake(cfg, flows, timeout=max(600, flows / 1000))
        print(f"demo day {DAY}: nfcapd received {got['received']:,} flows, the lake holds {got['lake']:,}")
    finally:
        stack.down_stack(cfg)


def lake_bytes(cfg) -> tuple[int, int, int]:
    import pyarrow.parquet as pq

    from flowlake.pipelines.lake_read import lake_files

    files = [Path(p) for p in lake_files(cfg.lake, "flows")[1]]  # the current version's (not the log's, nor replaced)
    return sum(p.stat().st_size for p in files), sum(pq.ParquetFile(p).metadata.num_rows for p in files), len(files)


def nfcapd_lz4_bytes(cfg, work: Path) -> tuple[int, int, int]:
    """Each spool file rewritten with LZ4 as nfcapd -y would have written it; flows by nfdump."""
    spool = cfg.path("nfcapd")
    files = sorted(p for p in spool.rglob("nfcapd.2*") if p.is_file())
    total = flows = 0
    for f in files:
        out = work / (f.name + ".lz4")
        subprocess.run(["nfdump", "-r", str(f), "-y", "-w", str(out)], check=True, capture_output=True)
        total += out.stat().st_size
        out.unlink()
    stat = subprocess.run(["nfdump", "-R", str(spool), "-I"], capture_output=True, text=True).stdout
    for line in stat.splitlines():
        if line.startswith("Flows:"):
            flows = int(line.split()[1])
    return total, flows, len(files)


def query_seconds(filter_text: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "flowlake.cli", "query", filter_text, "--from", DAY,
                    "--stats", "proto/flows"], check=True, capture_output=True)
    return time.perf_counter() - t0


def columns(cfg) -> dict[str, int]:
    import pyarrow.parquet as pq

    from flowlake.pipelines.lake_read import lake_files

    out: dict[str, int] = {}
    for p in lake_files(cfg.lake, "flows")[1]:
        md = pq.ParquetFile(p).metadata
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            for c in range(rg.num_columns):
                col = rg.column(c)
                out[col.path_in_schema] = out.get(col.path_in_schema, 0) + col.total_compressed_size
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, default=1_000_000)
    ap.add_argument("--home", help="scratch FLOWLAKE_HOME (reused if it already holds the day)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch home")
    ap.add_argument("--no-query", action="store_true", help="skip the query timings")
    args = ap.parse_args()
    from flowlake.base.ports import private_env

    home = Path(args.home or tempfile.mkdtemp(prefix="flowlake-bench-storage-"))
    home.mkdir(parents=True, exist_ok=True)
    env = private_env(home)
    env["FLOWLAKE_COLLECTOR_ROTATE_SECONDS"] = "10"  # the default rotation: files as a deployment has them
    env["FLOWLAKE_SPARK_TRIGGER_SECONDS"] = "10"
    os.environ.update(env)
    from flowlake.base import config
    from flowlake.pipelines import hour_close

    cfg = config.get()
    try:
        if not (cfg.lake / "flows").exists():
            build_day(cfg, args.flows)
        with tempfile.TemporaryDirectory() as work:
            nf_bytes, nf_flows, nf_files = nfcapd_lz4_bytes(cfg, Path(work))
        before, rows, nfiles = lake_bytes(cfg)
        cols_before = columns(cfg)
        q_before = {} if args.no_query else {q: query_seconds(q) for q in QUERIES}
        t0 = time.perf_counter()
        results = hour_close.run(cfg, date=DAY, settle=False)
        compact_s = time.perf_counter() - t0
        after, rows_after, nfiles_after = lake_bytes(cfg)
        cols_after = columns(cfg)
        q_after = {} if args.no_query else {q: query_seconds(q) for q in QUERIES}

        print(f"\nflows: lake {rows:,} (after compaction {rows_after:,}), nfcapd {nf_flows:,}")
        print(f"nfcapd files, LZ4 (nfdump -y), {nf_files} files: {nf_bytes / max(1, nf_flows):6.2f} bytes/flow")
        print(f"lake as ingested, {nfiles} files:          {before / max(1, rows):6.2f} bytes/flow")
        print(f"lake after hour close, {nfiles_after} files:      {after / max(1, rows_after):6.2f} bytes/flow "
              f"({after / max(1, before):.2f}x; {nf_bytes and after / nf_bytes:.2f}x nfcapd LZ4); "
              f"{len(results)} hours in {compact_s:.1f} s")
        print("\nbytes/flow per column   before   after")
        for c in sorted(cols_before, key=lambda c: -cols_before[c]):
            print(f"  {c:20s} {cols_before[c] / rows:7.2f} {cols_after.get(c, 0) / max(1, rows_after):7.2f}")
        for q in q_before:
            print(f"flowlake query {q!r:45s} before {q_before[q]:6.2f} s  after {q_after[q]:6.2f} s "
                  f"({rows / q_before[q] / 1e6:.2f} -> {rows / q_after[q] / 1e6:.2f} M flows/s as whole commands)")
    finally:
        if not args.keep and not args.home:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
