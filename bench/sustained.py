"""Sustained load through the whole chain: traffic model -> NetFlow v9 -> nfcapd ->
shipper -> Kafka -> ingest -> lake, at a steady rate for a while.

    python bench/sustained.py                          # 200k flows/s for 10 minutes
    python bench/sustained.py --rate 50000 --duration 60 --rotate 10
    python bench/sustained.py --minutes 3                # shorter, on a loaded machine

A private stack (`flowlake up` under a temporary FLOWLAKE_HOME, free ports) takes the
stream. The model's flows are generated once into a pool of datagrams (the model
makes ~20k flows/s in Python, far below the rate) and replayed round after round, each
round's headers moved on in time and sequence, so nfcapd sees fresh traffic without
sequence errors. Prints, at the end:
  - loss: flows sent vs nfcapd received (UDP), and flows in nfcapd's files vs rows in
    the lake per file (the pipeline's loss: must be 0);
  - end-to-end latency per nfcapd file, from the file's close (its mtime) to all of
    its rows readable by DuckDB in the lake, as a distribution, against rotation + 30 s;
  - the ingest's lag (offsets and estimated flows behind, pipelines/ingest_lag.py), max
    and at the end, and its peak memory (RSS of the ingest's process tree: driver,
    Spark JVM, Python workers).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def make_pool(flows: int, span_s: float, start_ms: int, seed: int):
    """[(router index, v9 datagram)] in sending order, plus datagrams per router."""
    from flowlake.collectors.traffic import api, model, netflow

    p = api.params_for("v9", None)
    f, _ = model.generate(p, start_ms, int(span_s * 1000), flows, seed=seed, allow_v6=p.ipv6_fraction > 0)
    items, per_router, addresses = [], [], []
    for i, r in enumerate(p.routers):
        ex = netflow.Exporter(9, i + 1, start_ms - api.ROUTER_UPTIME_MS, r.sampling_rate, r.address)
        dgs = ex.datagrams(f[f["router"] == i])
        items += [(d.export_ms, i, d.flows, d.payload) for d in dgs]
        per_router.append(len(dgs))
        addresses.append(r.address)
    items.sort(key=lambda t: t[0])
    return [(i, n, payload) for _, i, n, payload in items], per_router, addresses


class Sender(threading.Thread):
    """Replays the pool at `rate` flows/s for `duration` s; round k shifts unix_secs by
    k*span (flow times move with it: v9 times are relative to the header) and the
    sequence by k*datagrams of that router."""

    def __init__(self, pool, per_router, addresses, span_s, target, rate, duration):
        super().__init__(daemon=True)
        self.pool, self.per_router, self.span_s = pool, per_router, int(span_s)
        self.target, self.rate, self.duration = target, rate, duration
        from flowlake.collectors.traffic import exporter

        self.socks = [exporter.open_socket(a, target[0]) for a in addresses]
        self.flows = 0
        self.seconds = 0.0

    def run(self) -> None:
        t0 = time.perf_counter()
        k = 0
        while True:
            for n, (i, flows, payload) in enumerate(self.pool):
                if n % 16 == 0:
                    now = time.perf_counter() - t0
                    if now >= self.duration:
                        self.seconds = now
                        return
                    ahead = self.flows / self.rate - now
                    if ahead > 0:
                        time.sleep(ahead)
                buf = bytearray(payload)
                secs, seq = struct.unpack_from(">II", buf, 8)
                struct.pack_into(">II", buf, 8, secs + k * self.span_s, (seq + k * self.per_router[i]) & 0xFFFFFFFF)
                self.socks[i].sendto(buf, self.target)
                self.flows += flows
            k += 1


def tree_rss(pid: int | None) -> int:
    import psutil

    if pid is None:
        return 0
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


class Watcher(threading.Thread):
    """Every second: closed nfcapd files (close time = mtime, flows by the shipper's
    reader), new lake files (rows per source_file by DuckDB), the ingest's lag and RSS."""

    def __init__(self, cfg, binary: Path):
        super().__init__(daemon=True)
        self.cfg, self.binary = cfg, binary
        self.closed: dict[str, tuple[float, int]] = {}   # file -> (close time, flows)
        self.landed: dict[str, int] = {}                 # file -> rows seen in the lake
        self.landed_at: dict[str, float] = {}            # file -> latest rename into the lake of its rows
        self.visible: dict[str, float] = {}              # file -> when all rows were visible
        self.seen_parquet: set[str] = set()
        self.lag: list[tuple[float, int | None, int | None]] = []
        self.peak_rss = 0
        self.polls = 0
        self.stop = threading.Event()

    def poll_once(self) -> None:
        import duckdb

        from flowlake import components
        from flowlake.pipelines import ingest_lag

        spool = self.cfg.path("nfcapd")
        for f in spool.rglob("nfcapd.*"):
            rel = str(f.relative_to(spool))
            if ".current." in f.name or rel in self.closed or not f.is_file():
                continue
            res = subprocess.run([str(self.binary), "stats", str(f)], capture_output=True, text=True)
            if res.returncode == 0:
                self.closed[rel] = (f.stat().st_mtime, int(json.loads(res.stdout)["flows"]))
        from flowlake.pipelines.lake_read import lake_files  # noqa: PLC0415  (as the module's other imports)

        # the table's current files (never a glob: the log's checkpoints are Parquet too)
        new = [p for p in lake_files(self.cfg.lake, "flows")[1] if p not in self.seen_parquet]
        if new:
            files = ", ".join("'" + f.replace("'", "''") + "'" for f in new)
            # A lake file is visible to readers from its rename into the table (BatchWriter.publish),
            # which sets its ctime: the latency measured does not depend on this watcher's pace.
            rows = duckdb.connect().execute(
                f"select source_file, filename, count(*) from read_parquet([{files}], filename = true) "
                "group by all").fetchall()
            self.seen_parquet.update(new)
            for src, path, n in rows:
                self.landed[src] = self.landed.get(src, 0) + n
                self.landed_at[src] = max(self.landed_at.get(src, 0.0), os.stat(path).st_ctime)
        for rel, (_, flows) in self.closed.items():
            if rel not in self.visible and self.landed.get(rel, -1) >= flows:
                self.visible[rel] = self.landed_at[rel]
        self.polls += 1
        if self.polls % 5 == 1:  # two Kafka consumers a query: every 5 s is enough
            info = ingest_lag.status(self.cfg).get("flows", {})
            self.lag.append((time.time(), info.get("offsets_behind"), info.get("flows_behind_estimate")))
        self.peak_rss = max(self.peak_rss, tree_rss(components.get(self.cfg, "ingest").managed().pid()))

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                self.poll_once()
            except Exception as exc:  # a half-written file list: next round
                print(f"  watcher: {exc}", file=sys.stderr)
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - t0)))

    def pending(self) -> list[str]:
        return [f for f, (_, n) in self.closed.items() if n > 0 and f not in self.visible]


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=200_000, help="flows/s sent (default 200000)")
    ap.add_argument("--duration", type=float, default=600, help="seconds of sending (default 600)")
    ap.add_argument("--minutes", type=float, default=None, help="minutes of sending (overrides --duration; "
                    "e.g. --minutes 3 on a loaded machine)")
    ap.add_argument("--rotate", type=int, default=10, help="nfcapd rotation, seconds (collector.rotate_seconds)")
    ap.add_argument("--trigger", type=int, default=5, help="ingest trigger, seconds (spark.trigger_seconds)")
    ap.add_argument("--pool-seconds", type=float, default=4, help="model seconds of traffic generated once and replayed")
    ap.add_argument("--drain-timeout", type=float, default=300, help="seconds to wait for the lake after sending")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    if args.minutes is not None:
        args.duration = args.minutes * 60

    from flowlake.base.ports import private_env

    home = Path(tempfile.mkdtemp(prefix="flowlake-bench-sustained-"))
    os.environ.update({**private_env(home), "FLOWLAKE_COLLECTOR_ROTATE_SECONDS": str(args.rotate),
                       "FLOWLAKE_SPARK_TRIGGER_SECONDS": str(args.trigger), "FLOWLAKE_KAFKA_HEAP": "1g",
                       "FLOWLAKE_SPARK_DRIVER_MEMORY": "2g"})
    from flowlake import stack
    from flowlake.base import config
    from flowlake.collectors import nfcapd, ship

    config.reset()
    cfg = config.get()
    span = max(1, int(args.pool_seconds))
    print(f"sustained: {args.rate:,.0f} flows/s for {args.duration:.0f} s, rotation {args.rotate} s, "
          f"trigger {args.trigger} s; home {home}", flush=True)
    t0 = time.perf_counter()
    pool, per_router, addresses = make_pool(int(args.rate * span), span, int(time.time() * 1000), args.seed)
    print(f"pool: {sum(n for _, n, _ in pool):,} flows in {len(pool):,} datagrams "
          f"({time.perf_counter() - t0:.0f} s to model)", flush=True)
    binary = ship.build_binary()
    watcher = None
    try:
        stack.up_stack(cfg, with_superset=False)
        watcher = Watcher(cfg, binary)
        watcher.start()
        sender = Sender(pool, per_router, addresses, span, ("127.0.0.1", cfg.collector.port), args.rate,
                        args.duration)
        cpu0 = os.times()
        sender.start()
        while sender.is_alive():
            sender.join(30)
            lag = watcher.lag[-1] if watcher.lag else (0, None, None)
            print(f"  {time.strftime('%H:%M:%S')} sent {sender.flows:,} flows; files closed {len(watcher.closed)}, "
                  f"in the lake {len(watcher.visible)}; ingest lag {lag[1]} offsets (~{lag[2] or '-'} flows); "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
        cpu1 = os.times()
        # nfcapd closes its last file at the next rotation; then wait for the lake
        time.sleep(args.rotate + 3)
        deadline = time.monotonic() + args.drain_timeout
        while time.monotonic() < deadline:
            time.sleep(2)
            closed_flows = sum(n for _, n in watcher.closed.values())
            if closed_flows >= nfcapd.received(cfg)["flows"] and not watcher.pending():
                break
        watcher.stop.set()
        watcher.join(10)
        watcher.poll_once()

        received = nfcapd.received(cfg)
        in_files = sum(n for _, n in watcher.closed.values())
        in_lake = sum(watcher.landed.values())
        lat = [watcher.visible[f] - watcher.closed[f][0] for f in watcher.visible]
        missing = {f: (n, watcher.landed.get(f, 0)) for f, (_, n) in watcher.closed.items()
                   if watcher.landed.get(f, 0) != n}
        print()
        print(f"sent {sender.flows:,} flows in {sender.seconds:.0f} s = {sender.flows / sender.seconds:,.0f} flows/s "
              f"(sender CPU {cpu1.user - cpu0.user + cpu1.system - cpu0.system:.0f} s)")
        print(f"nfcapd received {received['flows']:,} (UDP loss {sender.flows - received['flows']:,}, "
              f"sequence errors {received['sequence_errors']})")
        print(f"nfcapd files {len(watcher.closed)} with {in_files:,} flows; lake {in_lake:,} rows")
        print(f"LOSS nfcapd files -> lake: {in_files - in_lake:,} flows; files not matching: {len(missing)}"
              + (f" e.g. {list(missing.items())[:3]}" if missing else ""))
        if lat:
            print(f"latency file closed -> rows visible to DuckDB, {len(lat)} files: p50 {percentile(lat, 50):.1f} s, "
                  f"p90 {percentile(lat, 90):.1f} s, p99 {percentile(lat, 99):.1f} s, max {max(lat):.1f} s "
                  f"(bound rotation + 30 = {args.rotate + 30} s: "
                  f"{'met' if percentile(lat, 99) <= args.rotate + 30 else 'NOT met'})")
        behind = [b for _, b, _ in watcher.lag if b is not None]
        flows_behind = [f for _, _, f in watcher.lag if f is not None]
        if behind:
            print(f"ingest lag: max {max(behind):,} offsets (~{max(flows_behind, default=0):,} flows), "
                  f"at the end {behind[-1]:,}")
        print(f"ingest peak memory (driver + Spark JVM + Python workers): {watcher.peak_rss / 2**20:,.0f} MiB")
        print(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores shared with the other developers)")
        return 0 if not missing and in_files == in_lake else 1
    finally:
        if watcher is not None:
            watcher.stop.set()
        stack.down_stack(cfg)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
