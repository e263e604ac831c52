"""Pure transforms shared by the report jobs: direction, protocol names, app labels,
and the roll-up of per-hour/per-direction aggregates to whole-day and `all` rows.

Everything here is Spark column expressions (no Python UDFs): on 10M flows a Python
round trip per row would cost more than the whole report.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from flowlake.pipelines.locality import parse_prefixes  # noqa: F401  (the one definition; re-exported)
from flowlake.schemas import FLOWS_TABLE
from flowlake.schemas.protocols import PROTO_NAMES  # noqa: F401  (re-exported for the jobs)

from . import count_once
from .count_rule import PASS_STATE

DIRECTIONS = ("inbound", "outbound", "internal", "transit")
DAY_HOUR = -1  # stands for "whole day" inside the jobs (joins/partitions on null are awkward)



# ---- direction ------------------------------------------------------------------------


# IPv6 text: eight hex groups, or fewer around one :: (at most seven: checked on the split);
# the same pattern as jobs/toptalkers/locality.go v6Text
V6_TEXT = (r"^(([0-9a-f]{1,4}:){7}[0-9a-f]{1,4}|"
           r"(([0-9a-f]{1,4}:)*[0-9a-f]{1,4})?::(([0-9a-f]{1,4}:)*[0-9a-f]{1,4})?)$")


def add_local_flag(df: DataFrame, addr_col: str, out: str, prefixes) -> DataFrame:
    """Add boolean column `out`: the text address in `addr_col` (IPv4 dotted, IPv6 text,
    IPv4-mapped IPv6 dotted or hex) lies in one of the prefixes; false for anything
    unparsable. The rule is pipelines/locality.py is_local (tests/pipelines/test_locality.py holds
    this code to it).

    Built in small stages (each a column reused by several tests) so Spark neither
    re-evaluates the parsing per prefix nor generates code too large to compile."""
    nets = parse_prefixes(prefixes)
    v4 = [n for n in nets if n.version == 4]
    v6 = [n for n in nets if n.version == 6]
    t = f"_{out}_"
    c = lambda name: F.col(t + name)  # noqa: E731
    df = df.withColumn(t + "a", F.lower(F.trim(F.col(addr_col))))
    # IPv4-mapped IPv6 (::ffff:a.b.c.d) is the IPv4 address.
    df = df.withColumn(t + "t", F.when(c("a").startswith("::ffff:") & c("a").contains("."),
                                       F.substring_index(c("a"), ":", -1)).otherwise(c("a")))
    df = df.withColumn(t + "6", c("t").contains(":"))
    temps = ["a", "t", "6"]
    v4_test = F.lit(False)
    v6_test = F.lit(False)
    if v6 or v4:
        # IPv6 groups: as many as the prefixes test, all eight when an IPv4 prefix may
        # match the hex form of an IPv4-mapped address (::ffff:a01:203)
        need = 8 if v4 else max(max((n.prefixlen + 15) // 16 for n in v6), 1)
        empty = F.array().cast("array<string>")
        df = df.withColumn(t + "h", F.when(c("6"), F.split(c("a"), "::", 2)))
        df = df.withColumns({
            t + "l": F.when(F.get(c("h"), 0) == "", empty).otherwise(F.split(F.get(c("h"), 0), ":")),
            t + "r": F.when(F.coalesce(F.get(c("h"), 1), F.lit("")) == "", empty).otherwise(F.split(F.get(c("h"), 1), ":")),
        })
        fill = F.array_repeat(F.lit("0"), F.greatest(F.lit(0), 8 - F.size(c("l")) - F.size(c("r"))))
        df = df.withColumn(t + "g", F.when(F.size(c("h")) == 2, F.concat(c("l"), fill, c("r"))).otherwise(F.split(c("a"), ":")))
        df = df.withColumns({f"{t}v{i}": F.conv(F.get(c("g"), i), 16, 10).try_cast("int") for i in range(need)})
        df = df.withColumn(t + "ok", (F.size(c("g")) == 8) & c("a").rlike(V6_TEXT)
                           & ((F.size(c("h")) < 2) | (F.size(c("l")) + F.size(c("r")) <= 7)))
        temps += ["h", "l", "r", "g", "ok"] + [f"v{i}" for i in range(need)]
        for n in v6:
            groups = [(int(n.network_address) >> (112 - 16 * i)) & 0xFFFF for i in range(8)]
            test = c("ok")
            for i in range(n.prefixlen // 16):
                test = test & (c(f"v{i}") == groups[i])
            rem = n.prefixlen % 16
            if rem:
                i = n.prefixlen // 16
                test = test & (F.shiftright(c(f"v{i}"), 16 - rem) == (groups[i] >> (16 - rem)))
            v6_test = v6_test | test
    if v4:
        df = df.withColumn(t + "p", F.when(~c("6"), F.split(c("t"), r"\.")))
        df = df.withColumns({f"{t}o{i}": F.get(c("p"), i).try_cast("long") for i in range(4)})
        octets = [c(f"o{i}") for i in range(4)]
        valid = (F.size(c("p")) == 4) & (F.greatest(*octets) <= 255) & (F.least(*octets) >= 0)
        mapped = c("6") & c("ok") & (c("v0") == 0) & (c("v1") == 0) & (c("v2") == 0) & (c("v3") == 0) \
            & (c("v4") == 0) & (c("v5") == 0xFFFF)
        df = df.withColumn(t + "ip", F.when(valid, octets[0] * 16777216 + octets[1] * 65536 + octets[2] * 256 + octets[3])
                           .when(mapped, c("v6").cast("long") * 65536 + c("v7")))
        temps += ["p", "o0", "o1", "o2", "o3", "ip"]
        # one reference to `ip` for all prefixes: an OR per prefix copied the whole parse
        # (now with the mapped form's eight groups) into the plan once per prefix, and the
        # optimizer ran out of heap on a site's few dozen prefixes
        ranges = F.array(*[F.struct(F.lit(int(n.network_address)).alias("s"), F.lit(int(n.broadcast_address)).alias("e"))
                           for n in v4])
        df = df.withColumn(t + "in4", F.exists(ranges, lambda r: c("ip").between(r["s"], r["e"])))
        temps.append("in4")
        v4_test = c("in4")
    df = df.withColumn(out, F.coalesce(F.when(c("6"), v6_test | v4_test).otherwise(v4_test), F.lit(False)))
    return df.drop(*[t + x for x in temps])


def with_direction(flows: DataFrame, prefixes) -> DataFrame:
    """Add `direction`: internal (local -> local), outbound (local -> remote), inbound
    (remote -> local), transit (remote -> remote)."""
    df = add_local_flag(flows, "src_addr", "_src_local", prefixes)
    df = add_local_flag(df, "dst_addr", "_dst_local", prefixes)
    s, d = F.col("_src_local"), F.col("_dst_local")
    label = F.when(s & d, "internal").when(s, "outbound").when(d, "inbound").otherwise("transit")
    return df.withColumn("direction", label).drop("_src_local", "_dst_local")


# ---- protocol names and app labels ----------------------------------------------------
def proto_name(proto: Column) -> Column:
    mapping = F.create_map(*[x for k, v in PROTO_NAMES.items() for x in (F.lit(k), F.lit(v))])
    return F.coalesce(mapping[proto], proto.cast("string"))


def port_bucket(port: Column) -> Column:
    return F.when(port < 1024, "wellknown").when(port < 49152, "registered").otherwise("dynamic")


def with_app(flows: DataFrame, port_map: dict[tuple[int, int], str]) -> DataFrame:
    """Add `app`: service of (proto, dst_port), else of (proto, src_port), else a bucket.

    The map is joined as a broadcast hash table (a literal map would be scanned per row).
    """
    spark = flows.sparkSession
    rows = [(proto * 65536 + port, service) for (proto, port), service in port_map.items()]
    table = spark.createDataFrame(rows or [(-1, "")], "app_key long, app_service string")
    dst_t = F.broadcast(table.withColumnRenamed("app_key", "_dk").withColumnRenamed("app_service", "_dsvc"))
    src_t = F.broadcast(table.withColumnRenamed("app_key", "_sk").withColumnRenamed("app_service", "_ssvc"))
    out = (flows
           .withColumn("_dk", F.col("proto").cast("long") * 65536 + F.col("dst_port"))
           .withColumn("_sk", F.col("proto").cast("long") * 65536 + F.col("src_port"))
           .join(dst_t, "_dk", "left").join(src_t, "_sk", "left"))
    ported = F.col("proto").isin(6, 17, 132)
    bucket = F.concat(F.lit("other-"), F.lower(proto_name(F.col("proto"))), F.lit("-"),
                      port_bucket(F.least("src_port", "dst_port")))
    fallback = F.when(ported, bucket).otherwise(F.lower(proto_name(F.col("proto"))))
    return out.withColumn("app", F.coalesce("_dsvc", "_ssvc", fallback)).drop("_dk", "_sk", "_dsvc", "_ssvc")


# ---- roll-ups -------------------------------------------------------------------------
def rollup_hour_direction(base: DataFrame, keys: list[str], sums: list[str]) -> DataFrame:
    """From rows keyed (hour, direction, *keys) add whole-day (hour = DAY_HOUR) and
    direction = 'all' rows: four grouping sets in one aggregation (one pass, one shuffle).
    hour and direction are never null in `base`, so a null after the roll-up means 'rolled up'."""
    aggs = [F.sum(c).alias(c) for c in sums]
    sets = [["hour", "direction", *keys], ["direction", *keys], ["hour", *keys], [*keys]]
    out = base.groupingSets([[F.col(c) for c in s] for s in sets], "hour", "direction", *keys).agg(*aggs)
    return (out.withColumn("hour", F.coalesce(F.col("hour"), F.lit(DAY_HOUR)))
            .withColumn("direction", F.coalesce(F.col("direction"), F.lit("all"))))


def add_shares(df: DataFrame, cols=("flows", "packets", "bytes"), by=("hour", "direction")) -> DataFrame:
    from pyspark.sql import Window

    w = Window.partitionBy(*by)
    for c in cols:
        total = F.sum(c).over(w)
        df = df.withColumn(f"{c}_share", F.when(total > 0, F.col(c) / total).otherwise(F.lit(0.0)))
    return df


def fold_beyond_top(df: DataFrame, group: list[str], key: str, top_n: int, other, sums: list[str],
                    always: Column | None = None) -> DataFrame:
    """Per `group`, the top_n rows by bytes (ties by `key`) as they are and the rest summed
    into one row whose `key` is `other`, so a list is bounded and still adds up. Rows where
    `always` holds (e.g. "none") stay whatever their volume and rank after the others."""
    from pyspark.sql import Window  # noqa: PLC0415  (as add_shares)

    order = [F.desc("bytes"), F.asc(key)] if always is None else [always, F.desc("bytes"), F.asc(key)]
    rank = F.row_number().over(Window.partitionBy(*group).orderBy(*order))
    keep = rank <= top_n if always is None else always | (rank <= top_n)
    return (df.withColumn(key, F.when(keep, F.col(key)).otherwise(F.lit(other).cast(df.schema[key].dataType)))
            .groupBy(*group, key).agg(*[F.sum(c).alias(c) for c in sums]))


def hour_to_null(df: DataFrame) -> DataFrame:
    return df.withColumn("hour", F.when(F.col("hour") == DAY_HOUR, F.lit(None)).otherwise(F.col("hour")).cast("int"))


def count_at(ctx) -> str:
    """The site's counting rule (`[site] count_at`), recorded as the rule of what this job
    writes: the report tables that declare `count_at` carry it (JobContext.write)."""
    rule, _ = count_once.settings(ctx.cfg)
    ctx.count_at = rule
    return rule


def site_flows(ctx, date=None) -> DataFrame:
    """The day's flows as reports of site traffic count them: `[site] count_at` applied
    (jobs/count_once.py, each flow once). Views of devices read ctx.flows() instead.

    On this machine (the report engine `local`: jobs/engines.py) the rule runs once per run:
    DuckDB writes the counted rows (counted_files), and every job of the run reads those.
    Elsewhere (a lake on a cluster) each job applies the Spark transform."""
    count_at(ctx)
    if date is None or date == ctx.date:
        files = counted_files(ctx)
        if files is not None:
            if not files:
                return ctx.spark.createDataFrame([], FLOWS_TABLE.spark_schema())
            base = str(Path(files[0]).parents[2])
            return ctx.spark.read.option("basePath", base).schema(FLOWS_TABLE.spark_schema()).parquet(*files)
    return count_once.site_flows(ctx.flows() if date is None else ctx.flows(date), ctx.cfg)


class _Counted:
    """The counted rows of one run (a folder under $FLOWLAKE_HOME/tmp), removed when the run
    ends (runner.run_jobs calls unpersist() on what the jobs shared)."""

    def __init__(self, folder: Path, files: list[str]):
        self.folder, self.files = folder, files

    def unpersist(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def counted_files(ctx) -> list[str] | None:
    """The day's flows as `[site] count_at` counts them, as Parquet files (hive paths
    date=D/hour=N) written once per run by DuckDB (count_rule.duckdb_sql, held equal to the
    Spark rule): what the local engines (Go top-talkers kernel, DuckDB) and, on this machine,
    the Spark jobs read. None for `all` (the lake's files as they are) and when the reports
    run on a cluster. DuckDB's memory for the pass is `[site] dedup_memory_mb`; a day
    larger than it allows is counted in passes over flow-key buckets (count_rule.counted_parquet)."""
    from flowlake.pipelines import duck  # noqa: PLC0415  (DuckDB: only for the local engines)

    from . import engines  # noqa: PLC0415  (cycle-free, light)

    rule, window = count_once.settings(ctx.cfg)
    count_at(ctx)
    if rule == "all":
        return None
    if engines.for_reports(ctx) != "local":
        return None
    cache = getattr(ctx, "shared", None)
    if cache is None:  # no run to remove the files at its end: the rule per job
        return None
    key = ("counted-files", ctx.date, rule, window)
    if key in cache:
        return cache[key].files
    files = duck.flow_files(ctx)

    def count(con, folder: Path) -> list[str]:
        mb = int(getattr(ctx.cfg.site, "dedup_memory_mb", 0) or 0)
        if mb > 0:
            con.execute(f"SET memory_limit = '{mb}MB'")
        t0, done = time.monotonic(), {}
        out = count_once.counted_parquet(con, files, ctx.cfg, folder / f"date={ctx.date.isoformat()}", report=done)
        # what the pass took, for `flowlake status` (one small file, overwritten by each run)
        if done:
            done.update(date=ctx.date.isoformat(), seconds=round(time.monotonic() - t0, 1))
            state = Path(ctx.cfg.path("state"))
            state.mkdir(parents=True, exist_ok=True)
            (state / PASS_STATE).write_text(json.dumps(done))
        return out

    cache[key] = _scratch(ctx, "count-once-", count)
    return cache[key].files


def _scratch(ctx, prefix: str, fill) -> _Counted:
    """fill(DuckDB connection, a new folder under $FLOWLAKE_HOME/tmp) -> the files it wrote
    there; the folder is removed if it fails, else when the run ends (_Counted)."""
    from flowlake.pipelines import duck  # noqa: PLC0415  (DuckDB: only for the local engines)

    tmp = Path(ctx.cfg.path("tmp"))
    tmp.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=tmp))
    con = duck.connect(ctx.cfg)
    try:
        return _Counted(folder, fill(con, folder))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        con.close()


# At most this many local addresses are broadcast to Spark's tasks (a few tens of MB); a
# day with more is labelled by the Spark rule (with_direction).
LOCAL_ADDRESSES_MAX = 1_000_000


def local_addresses(ctx) -> str | None:
    """A Parquet file of the day's local addresses (column `a`: each address text of the
    day's flows that lies in [site] local_prefixes), decided by DuckDB once per run
    (pipelines/duck.py: the reference rule, pipelines/locality.py is_local). None when the
    reports do not run on this machine, without a run, or above LOCAL_ADDRESSES_MAX.

    Why: the Spark rule parses every address text of every flow in every job that reads
    `direction`, 8-10 s per 1.1M flows per job on 2 cores; DuckDB decides each distinct
    address once (87,655 on the demo's day: 0.6 s) and the jobs join (1.2-2.5 s)."""
    from flowlake.pipelines import duck  # noqa: PLC0415  (DuckDB: only for the local engines)

    from . import engines  # noqa: PLC0415  (cycle-free, light)

    cache = getattr(ctx, "shared", None)
    if cache is None or engines.for_reports(ctx) != "local":
        return None
    prefixes = tuple(ctx.cfg.site.local_prefixes)
    key = ("local-addresses", ctx.date, prefixes)
    if key in cache:
        return cache[key].files[0] if cache[key].files else None
    files = duck.flow_files(ctx)

    def decide(con, folder: Path) -> list[str]:
        if not files:
            return []
        src = f"read_parquet({duck.sql_list(files)}, hive_partitioning = true, union_by_name = true)"
        duck._local_addresses(con, "day_addr", f"(SELECT src_addr AS a FROM {src} UNION ALL "
                                               f"SELECT dst_addr FROM {src})", list(prefixes))
        if con.execute("SELECT count(*) FROM day_addr WHERE loc").fetchone()[0] > LOCAL_ADDRESSES_MAX:
            return []
        path = folder / "local.parquet"
        con.execute(f"COPY (SELECT a FROM day_addr WHERE loc) TO '{path}' (FORMAT parquet)")
        return [str(path)]

    cache[key] = _scratch(ctx, "local-addresses-", decide)
    return cache[key].files[0] if cache[key].files else None


def day_direction(ctx, flows: DataFrame) -> DataFrame:
    """flows of ctx's day with `direction` as with_direction labels it: on this machine by a
    join with the day's local addresses (local_addresses), else by the Spark rule."""
    path = local_addresses(ctx)
    if path is None:
        return with_direction(flows, ctx.cfg.site.local_prefixes)
    loc = ctx.spark.read.parquet(path)
    s = F.broadcast(loc.select(F.col("a").alias("_src_a"), F.lit(True).alias("_src_local")))
    d = F.broadcast(loc.select(F.col("a").alias("_dst_a"), F.lit(True).alias("_dst_local")))
    df = (flows.join(s, flows["src_addr"] == s["_src_a"], "left")
          .join(d, F.col("dst_addr") == d["_dst_a"], "left"))
    sl, dl = F.col("_src_local").isNotNull(), F.col("_dst_local").isNotNull()
    label = F.when(sl & dl, "internal").when(sl, "outbound").when(dl, "inbound").otherwise("transit")
    return df.withColumn("direction", label).drop("_src_a", "_src_local", "_dst_a", "_dst_local")


def shared_flows(ctx) -> DataFrame:
    """The day's flows with `direction` (all columns; Spark prunes per job), counted once
    by `[site] count_at` (site_flows).

    Deliberately not cached: building Spark's in-memory copy of 10M flows cost ~120 CPU
    seconds (string columns, spills at a 2 GB heap), while re-reading the Parquet and
    re-deriving direction costs ~14 per job that uses it (measured, bench/jobs.py).
    The plan is shared through ctx.shared so every job reads the same definition."""
    count_at(ctx)
    cache = getattr(ctx, "shared", None)
    key = ("flows+direction", ctx.date)
    if cache is not None and key in cache:
        return cache[key]
    # every column: not cached, so Spark reads only those each job's plan uses (a fixed
    # list here once left out output_if and broke largest_flows)
    df = day_direction(ctx, site_flows(ctx))
    if cache is not None:
        cache[key] = df
    return df


def with_columns_or_null(flows: DataFrame, columns: dict[str, str]) -> DataFrame:
    """flows with each of `columns` (name -> Spark SQL type): a frame read from a lake, or
    declared, before the flow record's revision 3 lacks them, and they read as null."""
    missing = {c: F.lit(None).cast(t) for c, t in columns.items() if c not in flows.columns}
    return flows.withColumns(missing) if missing else flows
