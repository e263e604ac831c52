"""Server time of the capacity dashboard over a year of rollups, beside the same charts
over one day, in the same run.

Builds a year of rollups from the traffic model (the fast path of the rollup tests:
one modelled day subsampled and shifted, volume doubling over the year), runs the
capacity_forecast job, starts and provisions Superset under a scratch FLOWLAKE_HOME,
then asks Superset for every chart's data with its cache bypassed (force), once with
the time filter spanning all 365 days and once with one day. Prints figures, asserts nothing.

    .venv/bin/python bench/capacity_render.py [--flows-per-day 1000] [--rounds 3]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

FIRST = dt.date(2025, 11, 21)
DAYS = 365


def build_year(cfg, flows_per_day: int) -> int:
    import pyarrow as pa

    from flowlake.collectors.traffic import lake_rows, model
    from flowlake.jobs import capacity_forecast
    from flowlake.jobs.context import JobContext
    from flowlake.pipelines import rollups

    p = model.ModelParams()
    p.bulk, p.scanners, p.fanin, p.teleimmersion = [], [], [], []
    p.local_prefixes = list(cfg.site.local_prefixes)
    first_ms = int(dt.datetime.combine(FIRST, dt.time(), dt.timezone.utc).timestamp() * 1000)
    t0 = time.perf_counter()
    table = pa.concat_tables([lake_rows.lake_table(f, p) for _, f in
                              lake_rows.growing_days(p, first_ms, DAYS, flows_per_day, growth=1.0, seed=3)])
    con = rollups.connect()
    con.register("year_flows", table)
    written = rollups.write_days(cfg, "year_flows", con)
    capacity_forecast.run(JobContext(None, cfg, FIRST + dt.timedelta(days=DAYS - 1)))
    print(f"a year of rollups from {table.num_rows:,} modelled flows in {time.perf_counter() - t0:.1f} s: {written}")
    return table.num_rows


def chart_times(s, base: str, charts: list[dict], time_range: str) -> dict[str, float]:
    out = {}
    for c in charts:
        meta = s.get(f"{base}/api/v1/chart/{c['id']}").json()["result"]
        qc = json.loads(meta["query_context"])
        qc["force"] = True
        qc["datasource"] = {"id": meta["datasource_id"] if "datasource_id" in meta else qc["datasource"]["id"],
                            "type": "table"}
        for q in qc["queries"]:
            for f in q.get("filters", []):
                if f["op"] == "TEMPORAL_RANGE":
                    f["val"] = time_range
        t0 = time.perf_counter()
        r = s.post(f"{base}/api/v1/chart/data", json=qc)
        out[c["slice_name"]] = time.perf_counter() - t0
        if r.status_code != 200:
            raise RuntimeError(f"{c['slice_name']}: {r.status_code} {r.text[:300]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flows-per-day", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the scratch home and leave Superset running")
    args = ap.parse_args()
    import requests

    from flowlake.base.ports import private_env

    home = Path(tempfile.mkdtemp(prefix="flowlake-bench-capacity-"))
    os.environ.update(private_env(home))
    from flowlake import superset_cli
    from flowlake.base import config

    config.reset()
    cfg = config.get()
    try:
        build_year(cfg, args.flows_per_day)
        t0 = time.perf_counter()
        superset_cli.start(cfg)
        superset_cli.provision(cfg)
        print(f"Superset started and provisioned in {time.perf_counter() - t0:.1f} s")
        creds = superset_cli.credentials(cfg)
        s = requests.Session()
        r = s.post(creds["url"] + "/api/v1/security/login", json={
            "username": creds["username"], "password": creds["password"], "provider": "db", "refresh": False})
        s.headers["Authorization"] = "Bearer " + r.json()["access_token"]
        charts = s.get(creds["url"] + "/api/v1/dashboard/capacity/charts").json()["result"]
        last = FIRST + dt.timedelta(days=DAYS - 1)
        ranges = {"365 days": f"{FIRST} : {last + dt.timedelta(days=1)}", "1 day": f"{last} : {last + dt.timedelta(days=1)}"}
        figures = {k: [] for k in ranges}
        for _ in range(args.rounds):  # interleaved, so load changes hit both alike
            for label, tr in ranges.items():
                figures[label].append(chart_times(s, creds["url"], charts, tr))
        print(f"\ncapacity dashboard, {len(charts)} charts, Superset's cache bypassed; median of {args.rounds} rounds:")
        for name in figures["1 day"][0]:
            year = statistics.median(r[name] for r in figures["365 days"])
            day = statistics.median(r[name] for r in figures["1 day"])
            print(f"  {name[:60]:60s} 365 days {year:6.3f} s   1 day {day:6.3f} s")
        tot = {k: statistics.median(sum(r.values()) for r in v) for k, v in figures.items()}
        print(f"  {'all charts (sum of server times)':60s} 365 days {tot['365 days']:6.3f} s   1 day {tot['1 day']:6.3f} s "
              f"(ratio {tot['365 days'] / tot['1 day']:.2f})")
    finally:
        if not args.keep:
            superset_cli.stop(cfg)
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
