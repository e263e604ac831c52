"""Benchmark: what the alerts service costs on a busy stream (CPU per flow, memory over time).

In process, no Kafka: the traffic model's flows are generated once into a pool and replayed
interval after interval (each round moved on in flow time, as bench/sustained.py replays its
datagrams), each interval cut into FlowBatch messages of --per-message flows (zstd Arrow
IPC, the shipper's wire format) named like an nfcapd file, then read as the service reads
them: LedgerIntervals.flows_message per message, the file's ledger record, complete(), and
Engine.process on the gathered table with every detector of the configuration.

Prints the CPU seconds per million flows of the decoding + gathering and of each detector,
the process's RSS and Arrow's allocated bytes every --every intervals. Asserts nothing.

    nice -n 19 .venv/bin/python bench/alerts_load.py                      # 20 x 500k flows
    nice -n 19 .venv/bin/python bench/alerts_load.py --flows 1000000 --intervals 40
    nice -n 19 .venv/bin/python bench/alerts_load.py --findings out.json  # findings, to compare two trees
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import tempfile
import time
from pathlib import Path


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def messages_of(table, per_message: int) -> list[bytes]:
    import pyarrow as pa

    from flowlake.schemas import FLOW
    from flowlake.schemas.messages import flow_batch_header

    header = flow_batch_header(FLOW)
    out = []
    opts = pa.ipc.IpcWriteOptions(compression="zstd")
    for off in range(0, table.num_rows, per_message):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema, options=opts) as w:
            w.write_table(table.slice(off, per_message))
        out.append(header + sink.getvalue().to_pybytes())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, default=500_000, help="flows per interval (one nfcapd file)")
    ap.add_argument("--intervals", type=int, default=20)
    ap.add_argument("--pool", type=int, default=4, help="distinct intervals of modelled flows, replayed in rounds")
    ap.add_argument("--rotate", type=float, default=10.0, help="seconds of flow time per interval")
    ap.add_argument("--per-message", type=int, default=16_384, help="flows per FlowBatch message")
    ap.add_argument("--every", type=int, default=5, help="print memory every this many intervals")
    ap.add_argument("--blocklist", type=int, default=0,
                    help="block this many /24 prefixes of the pool's sources ([alerts] blocked_prefixes)")
    ap.add_argument("--findings", help="write every interval's findings here (JSON lines)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--release", action="store_true", help="the harness too releases Arrow's unused memory after each interval (the engine does it itself now)")
    a = ap.parse_args()

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from flowlake.base import config
    from flowlake.collectors.traffic import api, lake_rows, model
    from flowlake.pipelines.alerts import engine as engine_mod
    from flowlake.pipelines.alerts.engine import Engine
    from flowlake.pipelines.alerts.source import LedgerIntervals
    from flowlake.schemas import FLOW
    from flowlake.schemas.messages import arrow_schema

    home = Path(tempfile.mkdtemp(prefix="flowlake-bench-alerts-load-"))
    os.environ["FLOWLAKE_HOME"] = str(home)
    # no learning phases: fan-in and new talkers judge from the first minute, as a warm service does
    os.environ.update({"FLOWLAKE_ALERTS_WARMUP_MINUTES": "0.5", "FLOWLAKE_ALERTS_TALKERS_LEARN_MINUTES": "0.5"})
    schema = arrow_schema(FLOW)
    span_ms = int(a.rotate * 1000)
    p = api.params_for("v9", None)
    t0 = 1_764_000_000_000 - 1_764_000_000_000 % 86_400_000 + 14 * 3_600_000  # 14:00, a busy hour
    g0 = time.time()
    f, _ = model.generate(p, t0, span_ms * a.pool, a.flows * a.pool, seed=a.seed, allow_v6=p.ipv6_fraction > 0)
    print(f"pool: {len(f):,} modelled flows over {a.pool} intervals of {a.rotate:g} s ({time.time() - g0:.1f} s to make)")
    if a.blocklist:
        srcs = pc.unique(lake_rows.lake_table(f[:200_000], p)["src_addr"]).to_pylist()
        v4 = sorted({".".join(s.split(".")[:3]) + ".0/24" for s in srcs if "." in s})
        rng = np.random.default_rng(a.seed)
        chosen = [v4[i] for i in rng.choice(len(v4), min(a.blocklist, len(v4)), replace=False)]
        os.environ["FLOWLAKE_ALERTS_BLOCKED_PREFIXES"] = ",".join(chosen)
    config.reset()
    cfg = config.get()
    engine = Engine.from_config(cfg, sinks=[])
    engine.state_file = None  # no detectors.json writes in the measurement
    cpu = {d.name: 0.0 for d in engine.detectors}
    cpu.update({"decode+gather": 0.0, "clock+lifecycle": 0.0})

    def timed(d):
        inner = d.evaluate

        def evaluate(iv):
            c = time.process_time()
            try:
                got = inner(iv)
                found.extend(got)
                return got
            finally:
                cpu[d.name] += time.process_time() - c
        return evaluate

    found: list = []
    for d in engine.detectors:
        d.evaluate = timed(d)
    out = open(a.findings, "w") if a.findings else None
    bounds = np.searchsorted(f["t_end"], [t0 + k * span_ms for k in range(a.pool + 1)])
    print(f"{'interval':>8s} {'flows':>9s} {'msgs':>5s} {'CPU s':>6s} {'RSS MB':>7s} {'arrow MB':>8s}")
    total_flows, total_cpu = 0, 0.0
    w0 = time.time()
    for k in range(a.intervals):
        c, r = k % a.pool, k // a.pool
        part = f[bounds[c]:bounds[c + 1]].copy()
        shift = r * span_ms * a.pool
        part["t_start"] += shift
        part["t_end"] += shift
        start = t0 + k * span_ms
        name = f"nfcapd.{time.strftime('%Y%m%d%H%M%S', time.gmtime(start / 1000))}"
        table = lake_rows.lake_table(part, p, source_file=name).select(schema.names).cast(schema)
        msgs = messages_of(table, a.per_message)
        n = table.num_rows
        del table, part
        src = LedgerIntervals()
        c0 = time.process_time()
        for m in msgs:
            src.flows_message(m)
        src.ledger_message(json.dumps({"file": name, "flows": n}).encode())
        (got_name, flows), = src.complete()
        c1 = time.process_time()
        cpu["decode+gather"] += c1 - c0
        del msgs
        before = dict(cpu)
        engine.process(got_name, flows)
        c2 = time.process_time()
        cpu["clock+lifecycle"] += (c2 - c1) - sum(cpu[d.name] - before[d.name] for d in engine.detectors)
        total_flows, total_cpu = total_flows + n, total_cpu + (c2 - c0)
        if out:
            out.write(json.dumps({"interval": k, "findings": sorted(
                (dataclasses.asdict(x) for x in found), key=lambda x: (x["detector"], x["subject"]))},
                default=str, sort_keys=True) + "\n")
        found.clear()
        del flows, src
        if a.release:
            pa.default_memory_pool().release_unused()
        if (k + 1) % a.every == 0 or k == 0 or k + 1 == a.intervals:
            print(f"{k + 1:8d} {n:9,d} {len(range(0, n, a.per_message)):5d} {c2 - c0:6.2f} {rss_mb():7.0f} "
                  f"{pa.total_allocated_bytes() / 2**20:8.0f}", flush=True)
    print(f"{total_flows:,} flows in {a.intervals} intervals, {time.time() - w0:.0f} s wall (with the harness's encoding)")
    print("CPU seconds per million flows:")
    for name, s in sorted(cpu.items(), key=lambda kv: -kv[1]):
        print(f"  {name:18s} {s / total_flows * 1e6:6.3f}")
    print(f"  {'total':18s} {total_cpu / total_flows * 1e6:6.3f}")
    print(f"findings: {engine.findings}; open alerts {len(engine.lifecycle.open)}; arrow pool "
          f"{pa.default_memory_pool().backend_name}; RSS {rss_mb():.0f} MB")
    if out:
        out.close()
    del engine_mod
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
