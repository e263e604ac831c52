"""Benchmark of counting each flow once (issue 34): what `[site] count_at` costs the daily set.

Builds a modelled day of a multi-router border (collectors/traffic/border.py: three border
routers and a core, ingress-only and ingress+egress exporters, sampled and unsampled, a
third of the flows crossing two border routers) straight into a private lake: --flows
observations (default 10M) of about flows/2.3 truth flows (bench/jobs.py's synthetic day,
each flow entering at one border router). Then, in one Spark session, runs the jobs that
read site flows (bench/jobs.py's daily set plus traffic_totals) once per rule, `all` first
and last (the reference: the better of its two runs, so the JVM warming up favours no rule),
and prints per rule:
  - wall seconds of the set and of each job, and the ratio to `all`;
  - peak RSS of the Spark JVM and of this process (DuckDB runs here: the local engines of
    top_talkers and flow_size_dist), each reset before the rule's run (/proc/PID/clear_refs);
  - bytes the site's traffic_totals counted against the truth (the rules' exactness, again).
The issue's bar: `key` must not double the daily set's time. Nothing is asserted.

    .venv/bin/python bench/count_once.py                    # 10M observations (tens of minutes on 2 cores)
    .venv/bin/python bench/count_once.py --flows 2000000    # quicker look
    .venv/bin/python bench/count_once.py --pass-only --rules all,key,auto,all   # the rule's own pass, no Spark
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
JOBS = ["top_talkers", "protocol_mix", "app_mix", "traffic_ts", "flow_size_dist", "traffic_totals"]
RULES = ["all", "key", "boundary", "auto", "all"]
OBS_PER_FLOW = 2.3  # the border's observations per truth flow (second_every = 3), about


def _bench_jobs():
    spec = importlib.util.spec_from_file_location("bench_jobs", HERE / "jobs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def truth_day(n: int, seed: int = 34) -> pa.Table:
    """n truth flows (bench/jobs.py's synthetic day), each entering or leaving at one of the
    three border routers on its uplink (interface 1), counts as that router reports them
    (multiples of its sampling rate)."""
    from flowlake.collectors.traffic import border  # noqa: PLC0415  (bench start-up)

    bj = _bench_jobs()
    day = bj.synth_day(n, seed)
    with tempfile.TemporaryDirectory() as tmp:  # bench/jobs.py's columns, through its writer
        bj.write_lake(day, Path(tmp))
        table = pq.read_table(Path(tmp) / "flows", partitioning="hive")
    table = table.sort_by([("time_start", "ascending"), ("file_seq", "ascending")])
    outbound = np.asarray(pc.starts_with(table.column("src_addr"), "10.").to_numpy(zero_copy_only=False))
    # the entry router by the remote address, as routing picks it: flows of one key (ICMP and
    # GRE between two hosts have no ports) enter at one router, so `key` has no two truth flows
    # to merge across routers (by row, 0.02 % of them were: same key, same minute, two routers)
    remote = pc.if_else(pa.array(outbound), table.column("dst_addr"), table.column("src_addr"))
    entry = pc.dictionary_encode(remote.combine_chunks()).indices.to_numpy() % border.BORDERS
    rate = np.array([r.sampling_rate for r in border.ROUTERS[:border.BORDERS]], np.int64)[entry]
    lan = 10 + (np.arange(table.num_rows) % 4)
    cols = {"exporter": pa.array(np.array([r.address for r in border.ROUTERS], dtype=object)[entry], pa.string()),
            "input_if": pa.array(np.where(outbound, lan, 1).astype(np.int64)),
            "output_if": pa.array(np.where(outbound, 1, lan).astype(np.int64)),
            "packets": pa.array(table.column("packets").to_numpy() * rate),
            "bytes": pa.array(table.column("bytes").to_numpy() * rate)}
    for name, arr in cols.items():
        table = table.set_column(table.column_names.index(name), name, arr)
    hour = pc.hour(table.column("time_start")).cast(pa.int32())
    return table.drop_columns([c for c in ("date", "hour") if c in table.column_names]).append_column("hour", hour)


def write_observations(obs: pa.Table, lake: Path, day) -> None:
    hours = obs.column("hour").to_numpy()
    keep = [c for c in obs.column_names if c not in ("date", "hour", "truth_row")]
    for h in np.unique(hours):
        part = lake / "flows" / f"date={day}" / f"hour={int(h):02d}"
        part.mkdir(parents=True, exist_ok=True)
        pq.write_table(obs.filter(pa.array(hours == h)).select(keep), part / "part-0.parquet", compression="zstd",
                       row_group_size=1 << 20)


def _reset_peak(pid: int) -> None:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM (Linux >= 4.0)
    except OSError:
        pass


def _peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


QUERIES = {"any -s srcip/bytes": ("any", "srcip"), "proto udp -s dstport/flows": ("proto udp", "dstport"),
           "bytes > 100000 -s srcip/bytes": ("bytes > 100000", "srcip")}


def time_queries(cfg, rules=("all", "key", "auto"), turns: int = 2) -> dict:
    """`flowlake query` questions on the day, per rule (DuckDB engine, as the command runs it;
    CPU seconds of this process: DuckDB's threads run in it)."""
    from flowlake.jobs.query import parse  # noqa: PLC0415  (start-up: lark)
    from flowlake.jobs.query.engines import open_engine  # noqa: PLC0415  (start-up)

    out: dict = {}
    for what, (flt, key) in QUERIES.items():
        out[what] = {}
        for rule in rules:
            best = float("inf")
            for _ in range(turns):
                eng = open_engine(cfg, engine="local", count_at=rule)
                t = time.process_time()
                eng.top(parse(flt), key, "bytes", 10)
                best = min(best, time.process_time() - t)
                eng.close()
            out[what][rule] = best
    return out


def pass_only(cfg, day, rules: list[str], want: dict, seen: dict) -> None:
    """The rule's pass alone (common.counted_files' work): DuckDB reads the day, matches and
    writes the counted rows; `all` copies the day unchanged (the same read and write without
    the matching). Each in a fresh process: its own peak RSS (VmHWM) and CPU."""
    import json  # noqa: PLC0415  (only here)
    import subprocess  # noqa: PLC0415  (only here)

    code = """
import json, os, sys, time
from pathlib import Path
from flowlake.base import config
from flowlake.jobs import count_rule
from flowlake.pipelines import duck
cfg = config.get()
rule, mb, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
files = sorted(str(p) for p in (cfg.lake / "flows").rglob("*.parquet"))
con = duck.connect(cfg)
if mb:
    con.execute(f"SET memory_limit = '{mb}MB'")
t, c = time.perf_counter(), time.process_time()
if rule == "all":
    listed = ", ".join("'" + f + "'" for f in files)
    con.execute(f"COPY (SELECT * EXCLUDE (date) FROM read_parquet([{listed}], hive_partitioning = true, "
                f"union_by_name = true)) TO '{out}' (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (hour))")
    written = files
else:
    os.environ["FLOWLAKE_SITE_COUNT_AT"] = rule
    config.reset()
    written = count_rule.counted_parquet(con, files, config.get(), out)
n, b = con.execute("SELECT count(*), sum(bytes) FROM read_parquet([" + ", ".join("'" + str(f) + "'" for f in
                   sorted(out.rglob('*.parquet'))) + "])").fetchone()
# VmHWM, not ru_maxrss: that one keeps the forking parent's peak across exec
hwm = next(int(x.split()[1]) for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM:"))
print(json.dumps({"wall": time.perf_counter() - t, "cpu": time.process_time() - c, "rows": n, "bytes": int(b),
                  "rss_mib": hwm / 1024}))
"""
    mb = int(getattr(cfg.site, "dedup_memory_mb", 0) or 0)
    res = {}
    for i, rule in enumerate(rules):
        out = cfg.path("tmp", f"pass-{i}")
        p = subprocess.run([sys.executable, "-c", code, rule, str(mb), str(out)], capture_output=True, text=True,
                           env=os.environ)
        if p.returncode:
            sys.exit(f"{rule}: {p.stderr[-2000:]}")
        res.setdefault(rule, []).append(json.loads(p.stdout.strip().splitlines()[-1]))
        shutil.rmtree(out, ignore_errors=True)
        r = res[rule][-1]
        print(f"  {rule:8s} {r['wall']:7.1f} s wall {r['cpu']:7.1f} s CPU  peak RSS {r['rss_mib']:6.0f} MiB  "
              f"{r['rows']:,} rows", flush=True)
    best = {k: min(v, key=lambda r: r["wall"]) for k, v in res.items()}
    ref = best["all"]
    print()
    print(f"the rule's pass on {seen['flows']:,} observations of {want['flows']:,} flows (DuckDB, memory_limit "
          f"{mb or 'default'} MB; `all` = copying the day unchanged; best of the runs of each)")
    print(f"{'rule':9s} {'wall s':>8s} {'x all':>6s} {'CPU s':>8s} {'x all':>6s} {'RSS MiB':>8s}  "
          "rows / truth  bytes / truth")
    for rule, r in best.items():
        truth = seen if rule == "all" else want
        print(f"{rule:9s} {r['wall']:8.1f} {r['wall'] / ref['wall']:6.2f} {r['cpu']:8.1f} {r['cpu'] / ref['cpu']:6.2f} "
              f"{r['rss_mib']:8.0f}  {r['rows'] / truth['flows']:.4f}        {r['bytes'] / truth['bytes']:.4f}")
    queries = time_queries(cfg, ("all", "auto"), 1)
    print()
    print("flowlake query on DuckDB (in process, once), CPU seconds; x all:")
    for what, by_rule in queries.items():
        print(f"  {what:34s} " + "  ".join(f"{r} {t:6.2f} ({t / by_rule['all']:.1f}x)" for r, t in by_rule.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, default=10_000_000, help="observations in the lake (default 10M)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary FLOWLAKE_HOME")
    ap.add_argument("--rules", default=",".join(RULES),
                    help=f"the runs, in order (default {','.join(RULES)}; `all` must be among them)")
    ap.add_argument("--pass-only", action="store_true",
                    help="only the rule's own pass (DuckDB, what a run adds on this machine): per rule, "
                         "wall, CPU and peak RSS against copying the day unchanged; no Spark")
    args = ap.parse_args()
    rules = [r.strip() for r in args.rules.split(",") if r.strip()]

    from flowlake.collectors.traffic import border  # noqa: PLC0415  (after the arguments: --help is quick)

    bj = _bench_jobs()
    home = Path(tempfile.mkdtemp(prefix="flowlake-bench-count-once-"))
    os.environ["FLOWLAKE_HOME"] = str(home)
    from flowlake.base import config  # noqa: PLC0415  (after FLOWLAKE_HOME is set)

    config.reset()
    cfg = config.get()
    try:
        t = time.perf_counter()
        truth = truth_day(int(args.flows / OBS_PER_FLOW))
        obs = border.observations(truth)
        write_observations(obs, cfg.lake, bj.DAY)
        want = border.truth_totals(truth)
        print(f"modelled border: {truth.num_rows:,} flows seen as {obs.num_rows:,} observations "
              f"({obs.num_rows / truth.num_rows:.2f} each), written in {time.perf_counter() - t:.0f} s -> {cfg.lake}")
        seen = border.observed_totals(obs)
        del truth, obs
        if args.pass_only:
            return pass_only(cfg, bj.DAY, rules, want, seen)

        from flowlake.base import spark as spark_factory  # noqa: PLC0415  (start-up: pyspark)
        from flowlake.jobs import engines, runner  # noqa: PLC0415  (start-up: pyspark)

        spark = spark_factory.session("flowlake-bench-count-once", cfg=cfg)
        jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        found = runner.discover()
        engine = engines.choose(cfg, "reports", master=spark.sparkContext.master)
        runs = []
        for rule in rules:
            rcfg = config.load(env={**os.environ, "FLOWLAKE_SITE_COUNT_AT": rule})
            _reset_peak(jvm)
            _reset_peak(os.getpid())
            t = time.perf_counter()
            out = runner.run_jobs(spark, rcfg, bj.DAY, runner.order(found, JOBS))
            wall = time.perf_counter() - t
            bad = [(o.job, o.error) for o in out if o.status != "ok"]
            if bad:
                sys.exit(f"{rule}: job failed: {bad}")
            rows = pq.read_table(cfg.lake / "reports" / "traffic_totals" / f"date={bj.DAY}").to_pylist()
            (site,) = [r for r in rows if r["hour"] is None and r["direction"] == "all" and r["exporter"] == "all"]
            runs.append({"rule": rule, "wall": wall, "jobs": {o.job: o.seconds for o in out}, "jvm": _peak_mib(jvm),
                         "py": _peak_mib(os.getpid()), "bytes": site["bytes"]})
            print(f"  {rule:8s} {wall:7.1f} s   JVM peak {runs[-1]['jvm']:7.0f} MiB   "
                  f"this process {runs[-1]['py']:6.0f} MiB", flush=True)
        spark.stop()
        queries = time_queries(cfg)

        ref = min((r for r in runs if r["rule"] == "all"), key=lambda r: r["wall"])
        shown = [r for r in runs if r["rule"] != "all"] + [ref]
        print()
        print(f"daily set ({', '.join(JOBS)}; local engine for top_talkers/flow_size_dist: {engine}), "
              f"{seen['flows']:,} observations of {want['flows']:,} flows; `all` = the better of its 2 runs")
        print(f"{'rule':9s} {'wall s':>8s} {'x all':>6s} {'JVM MiB':>8s} {'x all':>6s} {'py MiB':>7s} {'x all':>6s}  "
              "site bytes / truth")
        for r in shown:
            print(f"{r['rule']:9s} {r['wall']:8.1f} {r['wall'] / ref['wall']:6.2f} {r['jvm']:8.0f} "
                  f"{r['jvm'] / ref['jvm']:6.2f} {r['py']:7.0f} {r['py'] / ref['py']:6.2f}  "
                  f"{r['bytes'] / want['bytes']:.4f}")
        print()
        print(f"{'job':16s} " + " ".join(f"{r['rule']:>9s}" for r in shown))
        for job in JOBS:
            print(f"{job:16s} " + " ".join(f"{r['jobs'][job]:9.1f}" for r in shown))
        key = next(r for r in runs if r["rule"] == "key")
        print()
        print(f"key / all, daily set wall: {key['wall'] / ref['wall']:.2f} (the issue's bar: below 2)")
        print()
        print("flowlake query on DuckDB (in process, best of 2), CPU seconds; x all:")
        for what, by_rule in queries.items():
            print(f"  {what:34s} " + "  ".join(f"{r} {t:6.2f} ({t / by_rule['all']:.1f}x)" for r, t in by_rule.items()))
    finally:
        if args.keep:
            print(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
