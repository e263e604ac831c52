"""The top_talkers table on one machine: the same rows as top_talkers.top_talkers
(Spark), computed by the Go kernel in jobs/toptalkers/ with DuckDB adding rank_change
and writing the table.

Why a native kernel: the issue asks top_talkers to run at no less than half nfdump's
single-thread rate (6-7M flows/s here), i.e. 10M flows in ~3 s on two cores, for 1,125
lists where nfdump makes one. Spark needs ~130 s for that and DuckDB ~12 s, most of
both in hashing address text into ~7M hourly pairs. The kernel interns each address
once into a small integer and from there sorts and sums integers: 2.2 s, 0.64x nfdump
(bench/jobs.py prints both). `[reports] engine` picks it (jobs/engines.py): `auto`
(default) unless Spark's master is a cluster and the lake is not on this machine.

Same definitions as the Spark job (tests/jobs/test_jobs.py checks the engines row for row,
and the table against nfdump's `-s` statistics): direction from [site] local_prefixes
with common.add_local_flag's text rules; rank ties broken by the other metrics
descending, then address text ascending; share against the hour's and direction's
total; rank_change against the previous day's table.
"""
from __future__ import annotations

import datetime as dt
import subprocess
import tempfile
from pathlib import Path

from flowlake.base.gobuild import TOPTALKERS
from flowlake.jobs import common, count_once
from flowlake.pipelines import duck


def lists(files: list[str], prefixes, top_n: int, out: Path) -> None:
    """Run the kernel over flow files (hive paths with hour=NN): the lists, without
    rank_change, as Parquet at `out`. (top_n is checked by the kernel, and for the config
    by top_talkers.run.)"""
    local = ",".join(str(n) for n in common.parse_prefixes(prefixes))
    binary = TOPTALKERS.build()
    with tempfile.NamedTemporaryFile("w+", suffix=".files") as listing:  # no argv limit on file count
        listing.write("\n".join(files))
        listing.flush()
        res = subprocess.run([str(binary), "-top-n", str(int(top_n)), "-local", local, "-out", str(out),
                              "-files", listing.name], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"top_talkers kernel ({binary.name}) failed: {res.stderr.strip() or res.returncode}")


def top_talkers_sql(lists_file: Path, previous: str | None = None) -> str:
    """The top_talkers table: the kernel's lists plus rank_change against `previous` (a
    DuckDB relation of the previous day's table) when given."""
    src = "read_parquet('" + str(lists_file).replace("'", "''") + "')"
    prev_join, change = "", "NULL::INTEGER"
    if previous is not None:
        prev_join = f"""LEFT JOIN {previous} p ON p.hour IS NOT DISTINCT FROM x.hour AND p.direction = x.direction
            AND p."by" = x."by" AND p.metric = x.metric AND p.src_addr IS NOT DISTINCT FROM x.src_addr
            AND p.dst_addr IS NOT DISTINCT FROM x.dst_addr"""
        change = "CAST(p.rank - x.rank AS INTEGER)"
    return f"""SELECT x.hour, x.direction, x."by", x.metric, x.rank, x.src_addr, x.dst_addr, x.bytes, x.packets,
            x.flows, x.share, {change} AS rank_change
        FROM {src} x {prev_join} ORDER BY x.hour NULLS LAST, x.direction, x."by", x.metric, x.rank"""


def top_talkers(con, files: list[str], prefixes, top_n: int, previous: str | None = None):
    """The top_talkers table of flow files as a pyarrow Table (tests, notebooks)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "lists.parquet"
        lists(files, prefixes, top_n, out)
        return con.execute(top_talkers_sql(out, previous)).fetch_arrow_table()


def run(ctx) -> bool:
    """Write the top_talkers table on this machine; False when there are no flow files
    (the caller's Spark path then writes the empty table)."""
    prev_files = duck.partition_files(ctx, "reports/top_talkers", ctx.date - dt.timedelta(days=1))
    files = duck.flow_files(ctx)
    if not files:
        return False
    con = duck.connect(ctx.cfg)
    try:
        previous = None
        if prev_files:
            con.execute(f"""CREATE TEMP VIEW tt_previous AS SELECT hour, direction, "by", metric, rank, src_addr, dst_addr
                            FROM read_parquet({duck.sql_list(prev_files)}, union_by_name = true)""")
            previous = "tt_previous"
        with tempfile.TemporaryDirectory(dir=ctx.cfg.path("tmp")) as tmp:
            out = Path(tmp) / "lists.parquet"
            # each flow once, by [site] count_at (the run's counted rows: common.counted_files;
            # `all` reads the lake as it is)
            counted = common.counted_files(ctx)
            if counted is None and common.count_at(ctx) != "all":  # no run to share them
                counted = count_once.counted_parquet(con, files, ctx.cfg, Path(tmp) / "counted")
            files = files if counted is None else counted
            if not files:
                return False
            lists(files, ctx.cfg.site.local_prefixes, int(ctx.cfg.reports.top_n), out)
            ctx.write_duckdb(con, top_talkers_sql(out, previous), "top_talkers")
    finally:
        con.close()
    return True
