"""Benchmark of the flows' `direction` label, which most daily reports group by: the Spark
rule (jobs/common.py with_direction: every address text of every flow parsed in Spark SQL,
in every job) against the local engine (common.local_addresses + day_direction: DuckDB
decides each distinct address of the day once by the reference rule, the jobs join).

Reads an existing lake (a demo's or a site's: FLOWLAKE_CONFIG) for one date, runs each way
--runs times in one Spark session, alternating, and prints wall seconds per run, the best of
each, the ratio, and the flows per label (they must be equal: the bench stops if not).

    FLOWLAKE_CONFIG=var/demo/site/flowlake.toml .venv/bin/python bench/direction.py --date 2026-11-28
"""
from __future__ import annotations

import argparse
import datetime as dt
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--date", required=True, type=dt.date.fromisoformat)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()

    from flowlake.base import config  # noqa: PLC0415  (after --help: Spark and DuckDB start-up)
    from flowlake.jobs import common  # noqa: PLC0415
    from flowlake.jobs.context import JobContext  # noqa: PLC0415
    from flowlake.pipelines.ingest import session  # noqa: PLC0415
    from flowlake.pipelines.lake_read import LakeReader  # noqa: PLC0415

    cfg = config.get()
    spark = session(cfg)
    ctx = JobContext(spark=spark, cfg=cfg, date=a.date, snapshot=LakeReader(cfg.lake))
    flows = ctx.flows()
    n = flows.count()
    print(f"{n:,} flows on {a.date} in {cfg.lake}; [site] local_prefixes = {list(cfg.site.local_prefixes)}")

    def spark_rule():
        return common.with_direction(flows, cfg.site.local_prefixes)

    def local():
        ctx.shared = {}  # a new run: DuckDB decides the addresses again, counted in the time
        return common.day_direction(ctx, flows)

    best, labels = {}, {}
    for i in range(a.runs):
        for name, fn in (("spark rule", spark_rule), ("duckdb addresses + join", local)):
            t0 = time.monotonic()
            got = dict(fn().groupBy("direction").count().collect())
            secs = time.monotonic() - t0
            for v in (ctx.shared or {}).values() if name != "spark rule" else ():
                v.unpersist()
            print(f"run {i + 1} {name:<24} {secs:6.1f} s  {n / secs / 1000:8.0f} k flows/s  {got}")
            best[name] = min(best.get(name, secs), secs)
            if labels.setdefault(name, got) != got:
                raise SystemExit(f"{name}: labels differ between runs")
    if labels["spark rule"] != labels["duckdb addresses + join"]:
        raise SystemExit(f"the two ways label differently: {labels}")
    ratio = best["spark rule"] / best["duckdb addresses + join"]
    print(f"best: spark rule {best['spark rule']:.1f} s, "
          f"duckdb addresses + join {best['duckdb addresses + join']:.1f} s: {ratio:.1f}x; labels equal")
    ctx.snapshot.close()


if __name__ == "__main__":
    main()
