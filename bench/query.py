"""Benchmark: `flowlake query` against `nfdump -R` on the same day of flows.

One synthetic day (numpy, seeded) is written twice:
  * as the lake (lake/flows/date=/hour=/) under a scratch FLOWLAKE_HOME, every hour closed
    by the compactor's own writer (pipelines/compact.py: its sort, encodings, zstd level and
    row groups from [compaction]): what a query reads once an hour has closed;
  * as NetFlow v5 datagrams sent to a real nfcapd (-y LZ4), giving the equivalent nfcapd
    file (one file for the day: nfdump's best case).
Then, in one run:
  1. whole commands, what the analyst waits for (process start, imports, scan, print):
     `flowlake query FILTER -s srcip/bytes` on the local engine (DuckDB) and `nfdump -R DIR
     -s srcip/bytes FILTER`, taken in turns, median wall time and CPU time of N rounds (flowlake
     answered by the warm query server as `flowlake up` runs it, its CPU counted with the
     command's; on its fast path in the command itself; and through click,
     `[query] fast_start = false`), and the fixed cost
     of a command that scans nothing; the
     Spark engine's whole command for the first filters (`--spark-commands`); the time to
     the first printed row of a listing; and both top-10s compared value for value;
  2. the engines in one process, scan only: the count of every filter on DuckDB and on
     Spark (session started once) against nfdump's count (`-s proto -n 0`); all must agree.
NetFlow v5 carries IPv4 only, so the synthetic flows are IPv4. The machine may be shared:
the load average is printed, and CPU seconds beside wall seconds.

    .venv/bin/python bench/query.py                # 3M flows (the issue's day)
    .venv/bin/python bench/query.py --flows 10000000 --rounds 5 --spark-commands 0
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("flowlake", "pipelines", "jobs", "schemas", "collectors")
sys.path.insert(0, str(ROOT / "tests"))  # nfcapd_capture, as bench/ship.py

FILTERS = [
    "any",
    "proto tcp and dst port 443",  # the example
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

    import duckdb

    from flowlake.base import config
    from flowlake.pipelines import compact
    from flowlake.schemas import FLOW

    settings = compact.Settings.from_config(config.get())
    con = duckdb.connect()
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
        batch = home / "staging" / part.name / "b0-0.parquet"
        batch.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({f.name: cols[f.name] for f in FLOW.fields if f.name in cols}), batch)
        # the closed hour as the compactor writes it (its sort, encodings, zstd level, row groups)
        compact.write_sorted(compact.sorted_reader(con, [batch], settings.sort, 65536), part, 0, settings, 1 << 40)
    shutil.rmtree(home / "staging")


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


def write_nfcapd(flows: dict, workdir: Path, attempts: int = 4) -> Path:
    """The day through a real nfcapd; captured again, paced slower, until the file holds
    every flow (on a loaded box nfcapd can miss datagrams: then it is not the same day)."""
    import nfcapd_capture

    n, burst = len(flows["ts"]), 200
    for attempt in range(attempts):
        def feed(port: int) -> None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
                for k, pkt in enumerate(v5_datagrams(flows)):
                    s.sendto(pkt, ("127.0.0.1", port))
                    if k % burst == burst - 1:
                        time.sleep(0.002)  # pace: nfcapd on a shared 2-core box must keep up
            time.sleep(2.0)

        nf = nfcapd_capture.capture(workdir / f"nfcapd{attempt}", feed, ["-y", "-B", str(64 << 20)], settle=1.0)[0]
        got = int(re.search(r"^Flows: (\d+)", subprocess.run(["nfdump", "-I", "-r", str(nf)], capture_output=True,
                                                              text=True).stdout, re.M).group(1))
        if got == n:
            return nf
        print(f"(nfcapd stored {got:,} of {n:,} flows at load {os.getloadavg()[0]:.1f}: capturing again, slower)")
        shutil.rmtree(nf.parent)
        burst = max(10, burst // 3)
    raise SystemExit(f"nfcapd lost flows in {attempts} captures: the machine is too loaded to compare with nfdump")


def nfdump_count(nf: Path, flt: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = subprocess.run(["nfdump", "-r", str(nf), "-s", "proto", "-n", "0", flt], capture_output=True, text=True)
    dt_ = time.perf_counter() - t0
    if out.returncode:
        raise SystemExit(f"nfdump failed on {flt!r}: {out.stderr}")
    m = re.search(r"total flows: (\d+)", out.stdout)
    return dt_, int(m.group(1)) if m else 0


def timed(cmd: list[str], env: dict) -> tuple[float, float, float, str]:
    """Run a whole command: (wall s, CPU s of the process and its children, s to the first
    line on stdout, stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as errf:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, env=env, text=True)
        first = proc.stdout.readline()
        t_first = time.perf_counter() - t0
        rest = proc.stdout.read()  # the same buffered reader: nothing read ahead is lost
        proc.wait()
        wall = time.perf_counter() - t0
        errf.seek(0)
        err = errf.read()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{cmd}: exit {proc.returncode}: {err}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, t_first, first + rest


def top10(out: str, val_col: int, cols: tuple) -> list[tuple]:
    """(val, flows, packets, bytes) rows of a CSV top-N (flowlake's or `nfdump -o csv`)."""
    rows = []
    for line in out.splitlines():
        f = line.split(",")
        if len(f) > max(cols) and f[val_col] not in ("val", "val ") and f[0] not in ("ts", "rank"):
            try:
                rows.append((f[val_col], *[int(f[c]) for c in cols]))
            except ValueError:
                continue
    return sorted(rows)


def whole_commands(args, work: Path, nfdir: Path) -> None:
    flowlake = str(Path(sys.executable).with_name("flowlake"))
    env = {**os.environ, "FLOWLAKE_HOME": str(work), "FLOWLAKE_QUERY_ENGINE": "local",
           "FLOWLAKE_QUERY_INDEX_DAYS": "100000"}  # the synthetic day may lie in the past
    # byte-compiled as an installed package is (the session may set PYTHONDONTWRITEBYTECODE,
    # and then every command would compile flowlake's modules anew)
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(ROOT / d) for d in PACKAGES)],
                   check=True, stdout=subprocess.DEVNULL)
    wall, cpu, _, out = timed([flowlake, "query-index"], env)
    print(f"\nflowlake query-index: {wall:.1f} s wall, {cpu:.1f} s CPU ({out.strip().splitlines()[-1][:50]}...: "
          "compacted hours are not indexed, their Parquet reads as fast)")
    # the warm query server (jobs/query/server.py, as `flowlake up` runs it), the fast
    # path (jobs/query/fast.py) in the command itself, and the same command through click
    local = {**env, "FLOWLAKE_QUERY_SERVER": "false"}
    envs = {"served": env, "fast": local, "click": {**local, "FLOWLAKE_QUERY_FAST_START": "false"}, "nfdump": env}
    stat = ["-s", "srcip/bytes", "-n", "10"]
    server = subprocess.Popen([flowlake, "query-server"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    sock = work / "run" / "query.sock"
    for _ in range(300):
        if sock.exists():
            break
        time.sleep(0.1)
    else:
        raise SystemExit("the query server did not start")
    import psutil

    served_by = psutil.Process(server.pid)

    def server_cpu() -> float:  # its answers' CPU (children reaped at once, SIGCHLD)
        t = served_by.cpu_times()
        return t.children_user + t.children_system + t.user + t.system

    def command(who: str, flt: str, *extra: str) -> list[str]:
        return [flowlake, "query", flt, *stat, *extra] if who != "nfdump" else ["nfdump", "-R", str(nfdir), *stat, *extra, flt]

    def run(who: str, cmd: list[str]) -> tuple:
        """timed(), with the server's CPU for the answer added to a served command's own."""
        c0 = server_cpu() if who == "served" else 0.0
        wall, cpu, first, out = timed(cmd, envs[who])
        if who == "served":
            time.sleep(0.05)  # the answer's child ends just after the command
            cpu += server_cpu() - c0
        return wall, cpu, first, out

    from flowlake.jobs.query.engines import duck_threads

    print(f"\n1. Whole commands, median of {args.rounds} rounds in turns, wall s / CPU s; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (a shared machine: wall follows CPU share); "
          f"DuckDB threads now {duck_threads(0)} ([query] threads = 0: every core unless oversubscribed)")
    print(f"{'filter  (-s srcip/bytes -n 10)':<56} {'served':>15} {'flowlake':>15} {'via click':>15} {'nfdump -R':>15} "
          f"{'nfdump/flowlake (served, fast, click)':>42}  top-10")
    whos = list(envs)
    tot = {w: [0.0, 0.0] for w in whos}
    for flt in FILTERS:
        runs = {w: [] for w in whos}
        for r in range(args.rounds):
            for who in whos[r % len(whos):] + whos[:r % len(whos)]:  # rotate who goes first
                runs[who].append(run(who, command(who, flt))[:3])
        med = {w: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for w, v in runs.items()}
        if flt == "any":  # a day's top-N: its rows print when the scan ends (the first line is their title)
            top_first = {w: (statistics.median(x[2] for x in v), med[w][1]) for w, v in runs.items()}
        for w in whos:
            tot[w][0] += med[w][0]
            tot[w][1] += med[w][1]
        ref = top10(timed(command("nfdump", flt, "-o", "csv", "-q"), env)[3], 4, (5, 7, 9))
        same = [top10(timed(command(w, flt, "--format", "csv"), envs[w])[3], 1, (2, 4, 6)) == ref
                for w in ("served", "fast", "click")]
        mine = ("served", "fast", "click")
        print(f"{flt:<56} " + " ".join(f"{med[w][0]:>7.2f} /{med[w][1]:>6.2f}" for w in whos)
              + " " + " ".join(f"{med['nfdump'][0] / med[w][0]:>12.2f}x" for w in mine) + "  "
              + ("equal" if all(same) else f"DIFFER (served {same[0]}, fast {same[1]}, click {same[2]})"))
    print(f"{'total':<56} " + " ".join(f"{tot[w][0]:>7.2f} /{tot[w][1]:>6.2f}" for w in whos)
          + " " + " ".join(f"{tot['nfdump'][0] / tot[w][0]:>12.2f}x" for w in mine)
          + "  (CPU: " + ", ".join(f"{tot['nfdump'][1] / tot[w][1]:.2f}x" for w in mine) + ")")
    fixed = {w: statistics.median(run(w, [flowlake, "query", "any", *stat, "--from", "2030-01-01"])[1]
                                  for _ in range(args.rounds)) for w in ("served", "fast", "click")}
    print("fixed cost of a command (a window with no hours: start, parser, config, DuckDB, no scan), median CPU s: "
          + ", ".join(f"{w} {v:.3f}" for w, v in fixed.items()))

    print("first rows of a day's top-N ('any' -s srcip/bytes -n 10), median s to the first line / CPU s: "
          + ", ".join(f"{w} {top_first[w][0]:.2f} / {top_first[w][1]:.2f}" for w in whos))
    for w in ("served", "fast", "click"):
        first = [timed([flowlake, "query", FILTERS[1], "--limit", "20"], envs[w])[2] for _ in range(args.rounds)]
        print(f"first row of a listing ({FILTERS[1]!r}, --limit 20), {w}: median {statistics.median(first):.2f} s; "
              f"a top-N prints its first rows when its whole command ends (above)")
    progress(flowlake, envs["served"])
    server.terminate()
    server.wait(30)
    for flt in FILTERS[1:1 + args.spark_commands]:
        wall = timed([flowlake, "query", flt, *stat, "--engine", "spark", "--master", args.master], local)[0]
        # wall only: the JVM is not a child this process waits for, so its CPU is not counted
        print(f"Spark engine, whole command, {flt!r}: {wall:.1f} s wall (JVM start included)")


def progress(flowlake: str, env: dict) -> None:
    """A long scan (every flow's full key, -s record) with --progress: the updates drawn on
    stderr while it runs (none in its first 0.5 s), and stdout free of them."""
    t0 = time.perf_counter()
    res = subprocess.run([flowlake, "query", "any", "-s", "record/bytes", "-n", "10", "--progress"],
                         capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    updates = [u.strip() for u in re.split(r"\s*\x1b\[K", res.stderr) if u.strip()]  # each redraw clears the line
    clean = res.returncode == 0 and "\x1b" not in res.stdout and "Top 10 record" in res.stdout
    print(f"progress of a long scan ('any' -s record/bytes, {wall:.1f} s wall): {len(updates)} updates on stderr"
          + (f", first {updates[0]!r}, last {updates[-1]!r}" if updates else "") + f"; stdout {'clean' if clean else 'NOT CLEAN'}")


def in_process(args, nf: Path) -> None:
    """Scan only: every filter's count on DuckDB and Spark in this process, and nfdump's."""
    from flowlake.base import config
    from flowlake.jobs.query import parse, sql
    from flowlake.jobs.query.duck import DuckEngine

    duck = DuckEngine(config.get())
    src = duck._source()
    counters = {"duckdb": lambda flt: duck.con.execute(f"SELECT count(*) FROM {src} WHERE {sql.to_sql(parse(flt))}").fetchone()[0]}
    if not args.no_spark:
        from flowlake.base import spark as spark_factory
        from flowlake.jobs.query import to_column
        from flowlake.jobs.query.lake import read_flows

        t0 = time.perf_counter()
        spark = spark_factory.session("flowlake-bench-query", master=args.master)
        lake = read_flows(spark, config.get().lake)
        lake.where("proto = -1").count()  # warm-up: JVM, file listing
        print(f"\n(Spark session + warm-up {time.perf_counter() - t0:.1f} s, {args.master})")
        counters["spark"] = lambda flt: lake.where(to_column(parse(flt))).count()
    names = list(counters)
    print(f"\n2. Scan only, in one process (s): count of every filter; load average {os.getloadavg()[0]:.1f}")
    print(f"{'filter':<58} {'matches':>11} " + " ".join(f"{n:>8}" for n in names) + f" {'nfdump':>8}  counts")
    tot = {n: 0.0 for n in names + ["nfdump"]}
    for flt in FILTERS:
        got, took = {}, {}
        for n in names:
            t0 = time.perf_counter()
            got[n] = counters[n](flt)
            took[n] = time.perf_counter() - t0
        took["nfdump"], n_nf = nfdump_count(nf, flt)
        for n in tot:
            tot[n] += took[n]
        bad = {n: v for n, v in got.items() if v != n_nf}
        print(f"{flt:<58} {n_nf:>11,} " + " ".join(f"{took[n]:>8.2f}" for n in names + ["nfdump"]) + "  "
              + ("equal" if not bad else f"DIFFER {bad}"))
    print(f"{'total':<58} {'':>11} " + " ".join(f"{tot[n]:>8.2f}" for n in names + ["nfdump"]))
    print("M flows/s filtered: " + ", ".join(f"{n} {args.flows * len(FILTERS) / tot[n] / 1e6:.1f}" for n in tot))
    duck.close()
    if "spark" in counters:
        spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, default=3_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--rounds", type=int, default=5, help="runs of every whole command (median printed)")
    ap.add_argument("--spark-commands", type=int, default=1,
                    help="filters timed as whole commands on the Spark engine (each starts a JVM)")
    ap.add_argument("--no-spark", action="store_true", help="skip the in-process Spark counts")
    ap.add_argument("--keep", action="store_true", help="keep the scratch lake and nfcapd file")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="flowlake-bench-query-"))
    os.environ["FLOWLAKE_HOME"] = str(work)
    from flowlake.base import config

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

        whole_commands(args, work, nf.parent)
        in_process(args, nf)
    finally:
        if args.keep:
            print("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
