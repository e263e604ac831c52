"""Delta Lake against today's Parquet lake on the same rows (issue 38; docs/design/delta-lake.md).

Rows: a modelled day (collectors/traffic model -> lake_rows.lake_table, the lake's columns,
no network in between). Four measurements, printed, nothing asserted:

1. Commit cost per micro-batch (`--batch` rows of the day, as the ingest lands them):
   today's HourFiles write into staging + BatchWriter.publish (renames, done-marker), against
   delta-rs `write_deltalake` with an application transaction (flowlake/base/delta.py
   append_batch), and against the ingest's own files committed by the driver
   (`create_write_transaction`, what a Spark ingest on Delta would do). Then the commit
   alone as the log grows (`--log-batches` small commits: delta-rs writes a checkpoint
   every 100).
2. Bytes per flow after an hour's sorted rewrite: the compactor (compact.write_sorted,
   its encodings), delta-rs writing the same sorted rows (its WriterProperties as close
   to the compactor's as they go), delta-rs OPTIMIZE Z-ORDER and OPTIMIZE compact of the
   appended table, and the compactor's files committed as the partition's replacement.
   Each says whether the rows come out in the compactor's sort order, and its row groups.
3. DuckDB: `delta_scan` of the table against `read_parquet` of the same hour's files.

    .venv/bin/python bench/delta_lake.py                    # 1M flows/day, hours 12-13, 50k-row batches
    .venv/bin/python bench/delta_lake.py --flows 300000 --hours 12 --batch 20000
    /work/idle-run .venv/bin/python bench/delta_lake.py     # at idle priority beside other work

The figures carry a "(not quiet)" label unless --quiet says the machine was idle.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import ColumnProperties, CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
from deltalake.transaction import AddAction

from flowlake.base import config, delta
from flowlake.collectors.traffic import lake_rows, model
from flowlake.pipelines import compact
from flowlake.pipelines.flow_ingest import DICTIONARY_COLUMNS, HourFiles
from flowlake.pipelines.lake_writer import BatchWriter

DAY = "2026-11-20"
START_MS = int(dt.datetime(2026, 11, 20, tzinfo=dt.UTC).timestamp() * 1000)
PARTS = ["date", "hour"]


def modelled_day(flows: int, seed: int):
    p = model.ModelParams()
    f, _ = model.generate(p, START_MS, 86_400_000, flows, seed=seed)
    return lake_rows.lake_table(f, p)


def median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# ---- 1. commit cost ------------------------------------------------------------------------
def today_batch(work: Path, batches: list, row_group_rows: int) -> dict:
    """HourFiles into staging (the task's write) + BatchWriter.publish (the driver's commit)."""
    w = BatchWriter(work / "lake" / "flows", work / "state", work / "lake" / ".staging" / "flows")
    write, publish = [], []
    for b, t in enumerate(batches):
        rows = t.drop_columns(["date", "hour"])
        staged = w.staging(b)
        t0 = time.perf_counter()
        files = HourFiles(staged, "part-00000", rows.schema, row_group_rows)
        files.add(rows)
        files.close()
        t1 = time.perf_counter()
        w.publish(b, staged, {"rows": rows.num_rows})
        publish.append(time.perf_counter() - t1)
        write.append(t1 - t0)
    return {"write": statistics.median(write), "publish": statistics.median(publish)}


def ingest_properties(level: int | None = None):
    """delta-rs WriterProperties like the ingest's files: zstd, dictionaries where values repeat."""
    return WriterProperties(compression="ZSTD", compression_level=level, max_row_group_size=262144,
                            default_column_properties=ColumnProperties(dictionary_enabled=False),
                            column_properties={c: ColumnProperties(dictionary_enabled=True)
                                               for c in DICTIONARY_COLUMNS})


def delta_batches(work: Path, batches: list) -> float:
    table = work / "delta-append"
    times = []
    for b, t in enumerate(batches):
        t0 = time.perf_counter()
        delta.append_batch(table, t, "ingest-flows", b, partition_by=PARTS, writer_properties=ingest_properties())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def commit_files(table: Path, files: list[tuple[Path, dict]], schema, app: str, version: int) -> None:
    """What a Spark ingest on Delta would do in the driver: its tasks wrote `files`
    into the table's partition folders; one commit adds them with the batch's transaction."""

    actions = []
    for f, part in files:
        st = f.stat()
        actions.append(AddAction(str(f.relative_to(table)), st.st_size, {k: str(v) for k, v in part.items()},
                                 int(st.st_mtime * 1000), True, delta.file_stats(f)))
    DeltaTable(str(table)).create_write_transaction(
        actions, mode="append", schema=schema, partition_by=PARTS,
        commit_properties=CommitProperties(app_transactions=[Transaction(app, version)]))


def driver_commits(work: Path, batches: list, row_group_rows: int) -> dict:
    """Tasks write their files straight into the table (today's HourFiles), the driver
    commits them: the write and the commit timed apart."""

    table = work / "delta-driver"
    schema = batches[0].schema
    us = pa.schema([f.with_type(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f for f in schema])
    write_deltalake(str(table), batches[0].cast(us).slice(0, 0), partition_by=PARTS)  # the table, empty
    delta_schema = DeltaTable(str(table)).schema().to_arrow()
    write, commit = [], []
    for b, t in enumerate(batches):
        rows = t.drop_columns(["date", "hour"])  # HourFiles: ms in, INT96 timestamps out, as the ingest today
        t0 = time.perf_counter()
        files = HourFiles(table, f"b{b:012d}-part-00000", rows.schema, row_group_rows)
        files.add(rows)
        written = files.close()
        t1 = time.perf_counter()
        out = []
        for path, _ in written:
            p = Path(path)
            out.append((p, {"date": p.parent.parent.name[5:], "hour": int(p.parent.name[5:])}))
        commit_files(table, out, delta_schema, "ingest-flows", b)
        commit.append(time.perf_counter() - t1)
        write.append(t1 - t0)


    con = duckdb.connect()
    delta.duckdb_load_delta(con)
    read = con.execute(f"SELECT count(*) FROM delta_scan('{table}')").fetchone()[0]
    con.close()
    return {"write": statistics.median(write), "commit": statistics.median(commit), "read": read,
            "want": sum(t.num_rows for t in batches)}


def log_growth(work: Path, commits: int, kept: bool) -> list[tuple[int, float]]:
    """The append commit alone (a one-row batch) as the table's log grows; kept: the
    writer keeps the table open (DeltaTable, updated incrementally), else opens it anew."""
    table = work / f"delta-log-{'kept' if kept else 'open'}"
    row = pa.table({"x": [1], "date": [DAY], "hour": pa.array([0], pa.int32())})
    delta.append_batch(table, row, "ingest-flows", 0, partition_by=PARTS)
    handle = DeltaTable(str(table)) if kept else table
    out = []
    for b in range(1, commits):
        t0 = time.perf_counter()
        delta.append_batch(handle, row, "ingest-flows", b, partition_by=PARTS)
        out.append((b, time.perf_counter() - t0))
    return out


# ---- 2. sorted hour rewrite ---------------------------------------------------------------
def row_order_ok(files: list[Path], sort: tuple[str, ...]) -> bool:
    """True when each file's rows are in `sort` order (a stable sort leaves them in place)."""
    for f in files:
        t = pq.ParquetFile(f).read(columns=list(sort))
        idx = pc.sort_indices(t, sort_keys=[(c, "ascending") for c in sort]).to_numpy()
        if not np.array_equal(idx, np.arange(t.num_rows)):
            return False
    return True


COLUMN_BYTES: dict[str, dict[str, int]] = {}  # variant -> column -> compressed bytes (all hours)


def file_facts(files: list[Path], variant: str = "") -> tuple[int, int, list[int]]:
    size = sum(f.stat().st_size for f in files)
    rows, groups = 0, []
    cols = COLUMN_BYTES.setdefault(variant, {})
    for f in files:
        md = pq.ParquetFile(f).metadata
        rows += md.num_rows
        groups += [md.row_group(g).num_rows for g in range(md.num_row_groups)]
        for g in range(md.num_row_groups):
            for c in range(md.num_columns):
                col = md.row_group(g).column(c)
                cols[col.path_in_schema] = cols.get(col.path_in_schema, 0) + col.total_compressed_size
    return size, rows, groups


def compactor_properties(s):
    """delta-rs WriterProperties as close to the compactor's as they go (compact.py)."""
    cols = {c: ColumnProperties(dictionary_enabled=False, encoding="DELTA_BINARY_PACKED")
            for c in compact.DELTA_COLUMNS}
    cols.update({c: ColumnProperties(dictionary_enabled=False) for c in compact.PLAIN_COLUMNS})
    return WriterProperties(compression="ZSTD", compression_level=s.zstd_level, max_row_group_size=s.row_group_rows,
                            data_page_size_limit=1 << 20, dictionary_page_size_limit=4 << 20,
                            default_column_properties=ColumnProperties(dictionary_enabled=True), column_properties=cols)


def hour_rewrites(work: Path, day, hours: list[int], s) -> list[dict]:
    results = []
    for hour in hours:
        rows = day.filter(pc.equal(day.column("hour"), hour))
        n = rows.num_rows
        # today's ingest files of the hour: a few batches' worth, unsorted
        src = work / "src" / f"hour={hour}"
        src.mkdir(parents=True, exist_ok=True)
        per = max(1, n // 8)
        for i in range(0, n, per):
            pq.write_table(rows.slice(i, per).drop_columns(["date", "hour"]), src / f"b{i:012d}-00000.zstd.parquet",
                           compression="zstd")
        inputs = sorted(src.glob("*.parquet"))
        con = duckdb.connect(config={"threads": 1, "memory_limit": "1GB"})
        out: dict = {"hour": hour, "rows": n}

        # A. the compactor today
        t0 = time.perf_counter()
        a_dir = work / "compactor" / f"hour={hour}"
        files = compact.write_sorted(compact.sorted_reader(con, inputs, s.sort, 65536), a_dir, 1, s,
                                     max(s.row_group_rows, 4 * s.row_group_rows))
        size, got, groups = file_facts(files, "compactor")
        out["compactor"] = {"bytes": size, "rows": got, "groups": groups, "s": time.perf_counter() - t0,
                            "sorted": row_order_ok(files, s.sort)}

        # B. delta-rs writes the same sorted rows (replace of the partition)
        table = work / "delta-sorted"
        sorted_rows = con.execute(
            f"SELECT *, '{DAY}' AS date, CAST({hour} AS INTEGER) AS hour "
            f"FROM read_parquet({compact._sql_list(inputs)}, hive_partitioning = false) "
            f"ORDER BY {', '.join(s.sort)}").fetch_arrow_table()
        t0 = time.perf_counter()
        write_deltalake(str(table), sorted_rows, mode="overwrite", predicate=f"date = '{DAY}' AND hour = {hour}",
                        partition_by=PARTS, writer_properties=compactor_properties(s), target_file_size=s.target_bytes)
        b_files = [Path(u) for u in delta.version_files(table, None, [("hour", "=", str(hour))])[1]]
        size, got, groups = file_facts(b_files, "delta-rs sorted write")
        out["delta-rs sorted write"] = {"bytes": size, "rows": got, "groups": groups, "s": time.perf_counter() - t0,
                                        "sorted": row_order_ok(b_files, s.sort)}

        # C/D. OPTIMIZE of the appended (unsorted) hour: Z-ORDER by the sort columns, and compact
        for name, how in (("delta-rs OPTIMIZE ZORDER", "z"), ("delta-rs OPTIMIZE compact", "c")):
            t = work / f"delta-opt-{how}-{hour}"
            for i, f in enumerate(inputs):
                part = pq.ParquetFile(f).read()
                part = part.append_column("date", pa.array([DAY] * part.num_rows)).append_column(
                    "hour", pa.array([hour] * part.num_rows, pa.int32()))
                delta.append_batch(t, part, "ingest-flows", i, partition_by=PARTS)
            t0 = time.perf_counter()
            opt = DeltaTable(str(t)).optimize
            filters = [("date", "=", DAY), ("hour", "=", str(hour))]
            if how == "z":
                opt.z_order(list(s.sort), partition_filters=filters, target_size=s.target_bytes,
                            writer_properties=compactor_properties(s))
            else:
                opt.compact(partition_filters=filters, target_size=s.target_bytes,
                            writer_properties=compactor_properties(s))
            o_files = [Path(u) for u in delta.version_files(t)[1]]
            size, got, groups = file_facts(o_files, name)
            out[name] = {"bytes": size, "rows": got, "groups": groups, "s": time.perf_counter() - t0,
                         "sorted": row_order_ok(o_files, s.sort)}

        # E. the compactor's files committed as the partition's replacement
        t = work / "delta-committed"
        if not t.exists():
            first = sorted_rows.slice(0, 1)
            write_deltalake(str(t), first.cast(pa.schema([
                f.with_type(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f
                for f in first.schema])), partition_by=PARTS)
        part_dir = t / f"date={DAY}" / f"hour={hour}"
        t0 = time.perf_counter()
        e_files = compact.write_sorted(compact.sorted_reader(con, inputs, s.sort, 65536), part_dir, 2, s,
                                       max(s.row_group_rows, 4 * s.row_group_rows))
        read = DeltaTable(str(t))  # the compactor's files replace what this version holds
        delta.commit_partition_files(t, e_files, {"date": DAY, "hour": hour}, read.schema().to_arrow(), PARTS,
                                     read_version=read.version())
        size, got, groups = file_facts(e_files, "committed")
        dcon = duckdb.connect()
        delta.duckdb_load_delta(dcon)
        read = dcon.execute(f"SELECT count(*) FROM delta_scan('{t}') WHERE hour = {hour}").fetchone()[0]
        dcon.close()
        out["compactor files committed"] = {"bytes": size, "rows": read, "groups": groups,
                                            "s": time.perf_counter() - t0, "sorted": True}
        con.close()
        results.append(out)
    return results


# ---- 3. DuckDB scans -------------------------------------------------------------------------
def scans(work: Path, hour: int, repeat: int) -> dict:
    q = "count(*), sum(bytes) FROM {src} WHERE proto = 6 AND dst_port = 443"
    glob = str(work / "delta-committed" / f"date={DAY}" / f"hour={hour}" / "*.parquet")
    table = work / "delta-committed"
    con = duckdb.connect()
    delta.duckdb_load_delta(con)
    try:
        want = con.execute("SELECT " + q.format(src=f"read_parquet('{glob}')")).fetchone()
        got = con.execute("SELECT " + q.format(src=f"delta_scan('{table}')") + f" AND hour = {hour}").fetchone()
        return {
            "equal": want == got,
            "read_parquet": median_s(
                lambda: con.execute("SELECT " + q.format(src=f"read_parquet('{glob}')")).fetchone(), repeat),
            "delta_scan": median_s(lambda: con.execute("SELECT " + q.format(src=f"delta_scan('{table}')")
                                                       + f" AND hour = {hour}").fetchone(), repeat),
            "delta_scan_all": median_s(
                lambda: con.execute("SELECT " + q.format(src=f"delta_scan('{table}')")).fetchone(), repeat),
            "load_extension": median_s(lambda: delta.duckdb_load_delta(duckdb.connect()), 3),
        }
    finally:
        con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, default=1_000_000, help="flows of the modelled day")
    ap.add_argument("--hours", type=int, nargs="+", default=[12, 13], help="hours to rewrite")
    ap.add_argument("--batch", type=int, default=50_000, help="rows per micro-batch")
    ap.add_argument("--batches", type=int, default=10, help="micro-batches timed")
    ap.add_argument("--log-batches", type=int, default=230, help="commits for the log-growth figure")
    ap.add_argument("--zstd-level", type=int, default=None, help="the compactor's level (default: [compaction])")
    ap.add_argument("--row-group-rows", type=int, default=None,
                    help="the compactor's row group (default: [compaction]); smaller than an hour shows who keeps it")
    ap.add_argument("--quiet", action="store_true", help="the machine was idle: drop the (not quiet) label")
    ap.add_argument("--keep", help="keep the scratch folder here")
    args = ap.parse_args()
    label = "" if args.quiet else " (not quiet)"


    s = compact.Settings.from_config(config.get())
    s = compact.Settings(s.settle_s, s.target_bytes, args.row_group_rows or s.row_group_rows,
                         args.zstd_level or s.zstd_level, s.sort, s.retired_grace_s)
    work = Path(args.keep or tempfile.mkdtemp(prefix="flowlake-bench-delta-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        day = modelled_day(args.flows, seed=1)
        print(f"modelled day: {day.num_rows:,} flows, {len(day.schema)} columns, built in "
              f"{time.perf_counter() - t0:.1f} s{label}; machine load {os.getloadavg()[0]:.1f}")

        # 1. micro-batches: consecutive slices of the day ordered by time, as a stream lands them
        ordered = day.sort_by("time_start")
        first = ordered.num_rows // 2
        batches = [ordered.slice(first + i * args.batch, args.batch) for i in range(args.batches)]
        today = today_batch(work / "today", batches, 262144)
        d_append = delta_batches(work, batches)
        driver = driver_commits(work, batches, 262144)
        print(f"\n1. per micro-batch of {args.batch:,} rows, median of {args.batches}{label}")
        print(f"   today:  task write {today['write'] * 1e3:7.1f} ms + BatchWriter.publish "
              f"{today['publish'] * 1e3:6.1f} ms")
        print(f"   delta:  tasks write {driver['write'] * 1e3:6.1f} ms + driver commit (create_write_transaction, "
              f"txn) {driver['commit'] * 1e3:6.1f} ms; delta_scan reads {driver['read']:,} of {driver['want']:,} rows")
        print(f"   delta:  write_deltalake append with txn (write + commit) {d_append * 1e3:7.1f} ms")
        for kept in (False, True):
            growth = log_growth(work, args.log_batches, kept)

            def at(lo, hi, growth=growth):
                got = [t for b, t in growth if lo <= b < hi]
                return statistics.median(got) * 1e3 if got else float("nan")

            n = args.log_batches
            print(f"   commit of a one-row batch as the log grows, table {'kept open' if kept else 'opened anew'}: "
                  f"batches 1-10 {at(1, 11):.1f} ms, 90-99 {at(90, 100):.1f} ms, 101-110 {at(101, 111):.1f} ms "
                  f"(after delta-rs' checkpoint at 100), {n - 10}-{n - 1} {at(n - 10, n):.1f} ms")

        # 2. sorted hour rewrites
        print(f"\n2. sorted rewrite of hours {args.hours} (sort {', '.join(s.sort)}; zstd {s.zstd_level}, "
              f"row groups {s.row_group_rows:,}){label}")
        totals: dict[str, list] = {}
        for r in hour_rewrites(work, day, args.hours, s):
            for name, v in r.items():
                if isinstance(v, dict):
                    t = totals.setdefault(name, [0, 0, 0.0, True, []])
                    t[0] += v["bytes"]
                    t[1] += v["rows"]
                    t[2] += v["s"]
                    t[3] = t[3] and v["sorted"]
                    t[4] += v["groups"]
                    if v["rows"] != r["rows"]:
                        print(f"   !! {name}: hour {r['hour']} holds {v['rows']} rows, want {r['rows']}")
        for name, (size, rows, secs, ordered_ok, groups) in totals.items():
            print(f"   {name:28s} {size / max(1, rows):6.2f} bytes/flow  {rows:>9,} rows  {secs:6.1f} s  "
                  f"in the compactor's order: {'yes' if ordered_ok else 'no'}; row groups "
                  f"{len(groups)} (largest {max(groups):,})")

        rows = totals["compactor"][1]
        a_cols, b_cols = COLUMN_BYTES["compactor"], COLUMN_BYTES["delta-rs sorted write"]
        diff = sorted(((b_cols.get(c, 0) - a_cols.get(c, 0)) / rows, c) for c in set(a_cols) | set(b_cols))
        print("   where delta-rs' sorted write differs (bytes/flow, delta-rs - compactor): "
              + ", ".join(f"{c} {d:+.2f}" for d, c in reversed(diff) if abs(d) >= 0.05))

        # 3. DuckDB scans
        sc = scans(work, args.hours[0], 7)
        print(f"\n3. DuckDB on hour {args.hours[0]} (count, sum of bytes where proto 6 and port 443; "
              f"median of 7){label}")
        print(f"   read_parquet of the hour's files  {sc['read_parquet'] * 1e3:7.1f} ms")
        print(f"   delta_scan, WHERE hour = {args.hours[0]:<2}        {sc['delta_scan'] * 1e3:7.1f} ms "
              f"(same answer: {sc['equal']})")
        print(f"   delta_scan of the whole table     {sc['delta_scan_all'] * 1e3:7.1f} ms")
        print(f"   LOAD of the extension (a new connection) {sc['load_extension'] * 1e3:7.1f} ms")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
