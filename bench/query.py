"""Benchmark: nfdump filters over the lake with Spark, beside nfdump on the same flows.

One synthetic flow set (numpy, seeded) is written twice:
  * as the lake (pyarrow Parquet, lake/flows/date=/hour=/, zstd) under a scratch FLOWLAKE_HOME;
  * as NetFlow v5 datagrams sent to a real nfcapd (-y LZ4), giving the equivalent nfcapd file.
Every filter is then timed as Spark `count()` over the lake and as nfdump over the file
(`-s proto -n 0`: filter and count, no per-record printing), and both counts must agree.
NetFlow v5 carries IPv4 only, so the synthetic flows are IPv4.

    .venv/bin/python bench/query.py                # 10M flows
    .venv/bin/python bench/query.py --flows 1000000 --master local[2]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # nfcapd_capture, as bench/ship.py

FILTERS = [
    "any",
    "proto tcp and dst port 22",
    "src net 10.1.0.0/16",
    "ip in [10.0.3.7 10.2.0.0/24 192.0.2.0/28]",
    "bytes > 100k",
    "flags S and not flags A",
    "port in [53 123 8080] and not proto tcp",
    "proto icmp and dst port 768",
    "not flags AS",
    "dst net 192.0.2.0/25 and packets < 3 and duration > 30",
]
DAY = dt.datetime(2026, 11, 20)
V5 = np.dtype([("src", ">u4"), ("dst", ">u4"), ("nexthop", ">u4"), ("input", ">u2"), ("output", ">u2"),
               ("pkts", ">u4"), ("octets", ">u4"), ("first", ">u4"), ("last", ">u4"), ("sport", ">u2"),
               ("dport", ">u2"), ("pad1", "u1"), ("flags", "u1"), ("proto", "u1"), ("tos", "u1"),
               ("src_as", ">u2"), ("dst_as", ">u2"), ("src_mask", "u1"), ("dst_mask", "u1"), ("pad2", ">u2")])
UPTIME_MS = 4_000_000_000


def synth(n: int, seed: int = 42) -> dict:
    rng = np.random.default_rng(seed)
    pool = np.concatenate([(10 << 24) + rng.integers(0, 1 << 18, 60000), (192 << 24) + (2 << 8) + np.arange(256)])
    ts = np.sort(rng.integers(0, 86_400_000, n)).astype(np.int64)  # ms into the day
    pk = (np.floor(rng.pareto(1.2, n)) + 1).astype(np.int64)
    proto = rng.choice(np.array([6, 6, 6, 17, 17, 1], np.int32), n)
    icmp = proto == 1
    sport = np.where(icmp, 0, rng.integers(1, 65536, n)).astype(np.int32)
    # ICMP: type*256+code in dst_port, as nfdump decodes it and the lake stores it
    dport = np.where(icmp, rng.choice(np.array([0, 768, 771, 2048, 2816], np.int32), n),
                     rng.choice(np.array([22, 53, 80, 123, 443, 8080, 3389, 25], np.int32), n)).astype(np.int32)
    return {
        "src": pool[rng.integers(0, len(pool), n)].astype(np.uint32),
        "dst": pool[rng.integers(0, len(pool), n)].astype(np.uint32),
        "sport": sport, "dport": dport, "proto": proto,
        "flags": rng.integers(0, 64, n).astype(np.int32),
        "packets": np.minimum(pk, 1_000_000), "bytes": np.minimum(pk * rng.integers(40, 1500, n), 2**32 - 1),
        "ts": ts, "dur": np.minimum(pk * rng.integers(0, 40, n), 3_000_000).astype(np.int64),
    }


def ip_text(v: np.ndarray) -> np.ndarray:
    uniq, inv = np.unique(v, return_inverse=True)
    txt = np.array([f"{u >> 24}.{(u >> 16) & 255}.{(u >> 8) & 255}.{u & 255}" for u in uniq.tolist()], dtype=object)
    return txt[inv]


def write_lake(flows: dict, home: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from flowlake.schemas import FLOW

    start = np.datetime64(DAY, "ms") + flows["ts"].astype("timedelta64[ms]")
    src, dst = ip_text(flows["src"]), ip_text(flows["dst"])
    hours = flows["ts"] // 3_600_000
    for h in range(24):
        lo, hi = np.searchsorted(hours, h), np.searchsorted(hours, h + 1)
        if lo == hi:
            continue
        s = slice(lo, hi)
        m = hi - lo
        cols = {
            "time_start": pa.array(start[s], pa.timestamp("ms", tz="UTC")),
            "time_end": pa.array(start[s] + flows["dur"][s].astype("timedelta64[ms]"), pa.timestamp("ms", tz="UTC")),
            "exporter": pa.array(["127.0.0.1"] * m), "input_if": np.zeros(m, np.int64), "output_if": np.zeros(m, np.int64),
            "src_addr": pa.array(src[s], pa.string()), "dst_addr": pa.array(dst[s], pa.string()),
            "src_port": flows["sport"][s], "dst_port": flows["dport"][s], "proto": flows["proto"][s],
            "tcp_flags": flows["flags"][s], "tos": np.zeros(m, np.int32), "packets": flows["packets"][s],
            "bytes": flows["bytes"][s], "sampling_rate": np.ones(m, np.int32), "src_as": np.zeros(m, np.int64),
            "dst_as": np.zeros(m, np.int64), "source_file": pa.array(["bench"] * m),
            "file_seq": np.arange(lo, hi, dtype=np.int64),
        }
        part = home / "lake" / "flows" / f"date={DAY:%Y-%m-%d}" / f"hour={h:02d}"
        part.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({f.name: cols[f.name] for f in FLOW.fields}), part / "part-0.parquet",
                       compression="zstd", row_group_size=1_000_000)


def v5_datagrams(flows: dict):
    """NetFlow v5 export packets (30 records each) carrying exactly these flows."""
    n = len(flows["ts"])
    day0 = int(DAY.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
    export_ms = day0 + 86_400_000 + 60_000  # export time after the last flow
    rec = np.zeros(n, V5)
    rec["src"], rec["dst"] = flows["src"], flows["dst"]
    rec["pkts"], rec["octets"] = flows["packets"], flows["bytes"]
    first = day0 + flows["ts"]
    rec["first"] = UPTIME_MS - (export_ms - first)
    rec["last"] = UPTIME_MS - (export_ms - (first + flows["dur"]))
    rec["sport"], rec["dport"] = flows["sport"], flows["dport"]
    rec["flags"], rec["proto"] = flows["flags"], flows["proto"]
    raw = rec.tobytes()
    for seq, i in enumerate(range(0, n, 30)):
        cnt = min(30, n - i)
        hdr = np.array([(5, cnt, UPTIME_MS, export_ms // 1000, (export_ms % 1000) * 1_000_000, i, 0, 0, 0)],
                       dtype=[("v", ">u2"), ("c", ">u2"), ("up", ">u4"), ("s", ">u4"), ("ns", ">u4"),
                              ("seq", ">u4"), ("et", "u1"), ("ei", "u1"), ("si", ">u2")]).tobytes()
        yield hdr + raw[i * 48:(i + cnt) * 48]


def write_nfcapd(flows: dict, workdir: Path) -> Path:
    import nfcapd_capture

    def feed(port: int) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
            for k, pkt in enumerate(v5_datagrams(flows)):
                s.sendto(pkt, ("127.0.0.1", port))
                if k % 200 == 199:
                    time.sleep(0.002)  # pace: nfcapd on a shared 2-core box must keep up
        time.sleep(2.0)

    return nfcapd_capture.capture(workdir / "nfcapd", feed, ["-y", "-B", str(64 << 20)], settle=1.0)[0]


def nfdump_count(nf: Path, flt: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = subprocess.run(["nfdump", "-r", str(nf), "-s", "proto", "-n", "0", flt], capture_output=True, text=True)
    dt_ = time.perf_counter() - t0
    if out.returncode:
        raise SystemExit(f"nfdump failed on {flt!r}: {out.stderr}")
    m = re.search(r"total flows: (\d+)", out.stdout)
    return dt_, int(m.group(1)) if m else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, default=10_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--keep", action="store_true", help="keep the scratch lake and nfcapd file")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="flowlake-bench-query-"))
    os.environ["FLOWLAKE_HOME"] = str(work)
    from flowlake import config

    config.reset()
    try:
        t0 = time.perf_counter()
        flows = synth(args.flows)
        write_lake(flows, work)
        t_lake = time.perf_counter() - t0
        t0 = time.perf_counter()
        nf = write_nfcapd(flows, work)
        t_nf = time.perf_counter() - t0
        print(f"{args.flows:,} flows: lake written in {t_lake:.1f} s "
              f"({sum(p.stat().st_size for p in (work / 'lake').rglob('*.parquet')) / args.flows:.1f} B/flow), "
              f"nfcapd file via NetFlow v5 in {t_nf:.1f} s ({nf.stat().st_size / args.flows:.1f} B/flow)")

        from flowlake import spark as spark_factory
        from flowlake.query import parse, to_column
        from flowlake.query.lake import read_flows

        t0 = time.perf_counter()
        spark = spark_factory.session("flowlake-bench-query", master=args.master)
        lake = read_flows(spark, config.get().lake)
        lake.where("proto = -1").count()  # warm-up: JVM, file listing
        print(f"Spark session + warm-up {time.perf_counter() - t0:.1f} s ({args.master})")
        print(f"{'filter':<58} {'matches':>11} {'spark s':>8} {'nfdump s':>9} {'spark/nfdump':>12}  counts")
        tot_s = tot_n = 0.0
        for flt in FILTERS:
            t0 = time.perf_counter()
            n_spark = lake.where(to_column(parse(flt))).count()
            t_s = time.perf_counter() - t0
            t_n, n_nf = nfdump_count(nf, flt)
            tot_s, tot_n = tot_s + t_s, tot_n + t_n
            print(f"{flt:<58} {n_spark:>11,} {t_s:>8.2f} {t_n:>9.2f} {t_s / t_n:>12.2f}  "
                  + ("equal" if n_spark == n_nf else f"DIFFER (nfdump {n_nf:,})"))
        print(f"{'total':<58} {'':>11} {tot_s:>8.2f} {tot_n:>9.2f} {tot_s / tot_n:>12.2f}")
        print(f"Spark {args.flows * len(FILTERS) / tot_s / 1e6:.1f} M flows/s filtered; "
              f"nfdump {args.flows * len(FILTERS) / tot_n / 1e6:.1f} M flows/s")
        spark.stop()
    finally:
        if args.keep:
            print("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
