"""The counting rule of issue 34 without Spark: its names, settings and its DuckDB form.

jobs/count_once.py is the rule on Spark (its docstring says what each rule counts); this
module is the same rule for the engines that must not import pyspark: `flowlake query` on
DuckDB (jobs/query/duck.py: ~0.1 s start-up), the Go top-talkers kernel and flow_size_dist
on DuckDB. count_once.py imports its names from here (one list of rules, one settings
reader), and tests/jobs/test_count_once.py holds duckdb_sql() equal to the Spark transform
row for row on the traffic model's border. Pure: only the standard library is imported.
"""
from __future__ import annotations

RULES = ("auto", "boundary", "key", "all")
DEFAULT_WINDOW_SECONDS = 60.0
KEY = ("src_addr", "dst_addr", "src_port", "dst_port", "proto")
# the columns the rule reads besides KEY (a filter on KEY alone may run before the rule: see duckdb_sql)
READS = KEY + ("exporter", "flow_direction", "in_if_boundary", "out_if_boundary", "time_start", "time_end",
               "sampling_rate", "packets", "bytes")


class CountRuleError(ValueError):
    """`[site] count_at` or `--count-at` is not one of RULES (the message names the input)."""


def check_rule(rule: str, where: str = "[site] count_at") -> str:
    r = str(rule).strip().lower()
    if r not in RULES:
        raise CountRuleError(f"{where} = {rule!r}: expected one of {', '.join(RULES)}")
    return r


def settings(cfg, override: str | None = None) -> tuple[str, float]:
    """(rule, window seconds) from the config's [site], `override` (e.g. --count-at) winning."""
    site = getattr(cfg, "site", None)
    rule = override if override else getattr(site, "count_at", "auto")
    window = getattr(site, "dedup_window_seconds", DEFAULT_WINDOW_SECONDS)
    try:
        window = float(window)
    except (TypeError, ValueError):
        raise CountRuleError(f"[site] dedup_window_seconds = {window!r}: expected a number of seconds") from None
    if window < 0:
        raise CountRuleError(f"[site] dedup_window_seconds = {window!r}: expected 0 or more seconds")
    return check_rule(rule, "--count-at" if override else "[site] count_at"), window


def query_settings(cfg, override: str | None = None) -> tuple[str, float, str]:
    """(rule, window seconds, where it came from) for `flowlake query`: --count-at, else
    `[query] count_at`, where "site" follows `[site] count_at`. The query's default is "all"
    (flowlake.toml): an investigation sees every observation as nfdump lists them, at
    nfdump's pace; matching observations first cost 14-52x the CPU of a query on a
    multi-router day (bench/count_once.py), which analysts opt into with --count-at."""
    if override:
        rule, window = settings(cfg, override)
        return rule, window, "--count-at"
    asked = getattr(getattr(cfg, "query", None), "count_at", "site")
    if str(asked).strip().lower() == "site":
        rule, window = settings(cfg)
        return rule, window, "[site] count_at"
    _, window = settings(cfg, "all")  # the window's checks, whatever the rule
    return check_rule(asked, "[query] count_at"), window, "[query] count_at"


def describe(rule: str, window_seconds: float, override: str | None = None, where: str | None = None) -> str:
    """One line naming the rule a query counted with (printed on stderr by `flowlake query`)."""
    where = where or ("--count-at" if override else "[site] count_at")
    if rule == "all":
        return f"counted with {where} = all (every observation)"
    return f"counted with {where} = {rule} (each flow once; window {window_seconds:g} s)"


# ---- DuckDB (the local report engines: top_talkers_local, flow_size_dist_duckdb; flowlake query) ----
_SQL_HELPERS = ("_co_ib", "_co_ob", "_co_ing", "_co_s", "_co_e", "_co_d", "_co_rate", "_co_ing_exp", "_co_cls",
                "_co_kb", "_co_pe", "_co_cl", "_co_pr", "_co_pp", "_co_pb", "_co_placed", "_co_cand", "_co_bx",
                "_co_bd", "_co_counted")


def duckdb_sql(relation: str, rule: str, window_seconds: float = DEFAULT_WINDOW_SECONDS,
               key_filter: str | None = None, exporters: str | None = None) -> str:
    """The rows of `relation` (a DuckDB table expression with the lake's flow columns) that
    `rule` counts, as a query with the relation's own columns: count_once() in SQL, held
    equal to it row for row by tests/jobs/test_count_once.py.

    `key_filter`: a condition on KEY's columns only (a query's `host`, `port`, `proto`),
    applied before the matching, so the windows sort only the keys asked about. Exact: the
    rule matches observations within a key, and reads one thing across keys, whether an
    exporter exports ingress records, which comes from every row of `relation` (or of
    `exporters`, the whole day, when `relation` holds only some keys' rows)."""
    rule = check_rule(rule)
    where = f" WHERE {key_filter}" if key_filter else ""
    if rule == "all":
        return f"SELECT * FROM {relation}{where}"
    ctes, counted = _rule_ctes(relation, rule, window_seconds, where, exporters)
    return f"""{ctes}
    SELECT * EXCLUDE ({", ".join(h for h in _SQL_HELPERS if h != "_co_counted")})
    FROM co_u WHERE {counted}"""


def duckdb_marks_sql(relation: str, rule: str, window_seconds: float = DEFAULT_WINDOW_SECONDS) -> str:
    """Every row of `relation` with mark()'s columns (jobs/count_once.py): `_co_classified`,
    `_co_points` (the flow's observation points), `_co_contradictory` and `_co_counted`
    (whether `rule` counts the row; every row for `all`). For observation_points on DuckDB,
    held equal to the Spark job by tests/jobs/test_count_once.py."""
    rule = check_rule(rule)
    ctes, counted = _rule_ctes(relation, "key" if rule == "all" else rule, window_seconds, "", None)
    flow = f"PARTITION BY {', '.join(KEY)}, _co_cl"
    return f"""{ctes}
    SELECT * EXCLUDE ({", ".join(h for h in _SQL_HELPERS if h != "_co_counted")}),
           _co_cls AS _co_classified,
           count(DISTINCT (exporter, _co_d)) OVER ({flow}) AS _co_points,
           (bool_or(_co_ib = 'external') OVER ({flow}) AND bool_or(_co_ob = 'external') OVER ({flow}))
               AS _co_contradictory,
           {"TRUE" if rule == "all" else counted} AS _co_counted
    FROM co_u"""


def _rule_ctes(relation: str, rule: str, window_seconds: float, where: str, exporters: str | None) -> tuple[str, str]:
    """The rule's common table expressions (ending in co_u) and its counted condition."""
    w = int(round(window_seconds * 1000))
    key = ", ".join(KEY)
    # a total order (a lake row is one (source_file, file_seq)): co_p and co_c sort apart, and
    # with ties DuckDB's threads ordered two observations of equal times differently in each,
    # splitting one flow into two clusters (counted twice)
    by_key = f"PARTITION BY {key} ORDER BY _co_s, _co_e, exporter, _co_d, source_file, file_seq"
    point = f"PARTITION BY {key}, _co_cl, exporter, _co_d"
    cand = "TRUE" if rule == "key" else "_co_cand"
    first = f"(NOT {cand}), " + ("" if rule == "key" else "(NOT _co_cls), ")
    best = (f"PARTITION BY {key}, _co_cl ORDER BY {first}_co_pr, -_co_pp, -_co_pb, exporter, _co_d "
            "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING")
    is_best = "(exporter = _co_bx AND _co_d = _co_bd)"
    counted = is_best if rule == "key" else f"(_co_cand AND {is_best})"
    return f"""
    WITH co_f AS (SELECT *, coalesce(in_if_boundary, '') AS _co_ib, coalesce(out_if_boundary, '') AS _co_ob,
                         (flow_direction IS NULL OR flow_direction = 0) AS _co_ing,
                         epoch_ms(time_start) AS _co_s, epoch_ms(time_end) AS _co_e,
                         coalesce(flow_direction, 0) AS _co_d,
                         CASE WHEN sampling_rate IS NULL OR sampling_rate <= 0 THEN 2147483647
                              ELSE sampling_rate END AS _co_rate
                  FROM {relation}{where}),
    co_x AS (SELECT exporter, max((flow_direction IS NULL OR flow_direction = 0)::INTEGER) AS _co_ing_exp
             FROM {exporters or relation} GROUP BY exporter),
    co_g AS (SELECT co_f.*, co_x._co_ing_exp, (_co_ib <> '' OR _co_ob <> '') AS _co_cls,
                    ((_co_ib = 'external' OR _co_ob = 'external')
                     AND (_co_ing OR coalesce(co_x._co_ing_exp, 0) = 0)) AS _co_kb
             FROM co_f LEFT JOIN co_x USING (exporter)),
    co_p AS (SELECT *, max(_co_e) OVER ({by_key} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS _co_pe
             FROM co_g),
    co_c AS (SELECT *, sum(CASE WHEN _co_pe IS NULL OR _co_s > _co_pe + {w} THEN 1 ELSE 0 END)
                       OVER ({by_key} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _co_cl
             FROM co_p),
    co_r AS (SELECT *, max(_co_rate) OVER ({point}) AS _co_pr, sum(packets) OVER ({point}) AS _co_pp,
                    sum(bytes) OVER ({point}) AS _co_pb, (NOT _co_cls OR _co_kb) AS _co_placed
             FROM co_c),
    co_q AS (SELECT *, (_co_placed OR NOT bool_or(_co_placed) OVER (PARTITION BY {key}, _co_cl)) AS _co_cand
             FROM co_r),
    co_u AS (SELECT *, first_value(exporter) OVER ({best}) AS _co_bx, first_value(_co_d) OVER ({best}) AS _co_bd
             FROM co_q)""", counted


def duckdb_relation(con, relation: str) -> str:
    """`relation` with the columns the rule reads that its files lack (lake days from before
    enrichment or revision 3) as NULL, as Spark's reader gives them."""
    return with_rule_columns(relation, {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()})


def with_rule_columns(relation: str, have) -> str:
    """`relation` (whose columns are `have`) with the rule's columns it lacks as NULL."""
    missing = [f"CAST(NULL AS {t}) AS {c}" for c, t in (("in_if_boundary", "VARCHAR"), ("out_if_boundary", "VARCHAR"),
                                                        ("flow_direction", "INTEGER"), ("source_file", "VARCHAR"),
                                                        ("file_seq", "BIGINT")) if c not in have]
    return f"(SELECT *, {', '.join(missing)} FROM {relation})" if missing else relation


# DuckDB's window operators keep a partition's rows in memory (they do not spill): a
# 10M-observation day peaked at 4.7 GB unbounded, about 0.47 GB per million; a pass takes
# half that density (a million observations per GiB of its memory limit) as its margin
ROWS_PER_GIB = 1_000_000
# the last run's pass (rule, observations, passes, memory limit, date, seconds), for status
PASS_STATE = "count_once_pass.json"
_UNITS = {"": 1, "b": 1, "bytes": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def memory_limit_bytes(con, text: str | None = None) -> float:
    """DuckDB's memory_limit on `con` ('12.4 GiB', '1000.0 MiB', ...; or `text`, as read) in bytes."""
    text = (text or con.execute("SELECT current_setting('memory_limit')").fetchone()[0]).strip()
    num = text.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ").strip()
    return float(num) * _UNITS[text[len(num):].strip().lower()]


def passes_for(rows: int, limit_bytes: float) -> int:
    """How many passes of the rule (each over one bucket of flow keys) keep a day of `rows`
    observations inside `limit_bytes`."""
    per_pass = max(1, int(limit_bytes / 2**30 * ROWS_PER_GIB))
    return max(1, -(-rows // per_pass))


# read_parquet's identity of a row: the rule's windows run over the columns they read and
# these two, and the counted rows' every column comes back by a semi join on them
_ROW_ID = "filename = true, file_row_number = true"
_RULE_COLUMNS = (*KEY, "time_start", "time_end", "exporter", "flow_direction", "in_if_boundary", "out_if_boundary",
                 "sampling_rate", "packets", "bytes", "source_file", "file_seq")


def _copy_counted(con, source: str, rule: str, window: float, target: str, exporters: str | None = None) -> None:
    """COPY the rows of `source` (a read_parquet with _ROW_ID) that `rule` counts TO `target`,
    every column but date. DuckDB's window operators carry every column of their rows
    through each sort: over the rule's columns alone, then a semi join back to the whole
    rows, the demo day's pass took 9.8 s instead of 23.6 (1.9M observations, 70 columns)."""
    rel = duckdb_relation(con, source)
    narrow = f"(SELECT {', '.join(_RULE_COLUMNS)}, filename, file_row_number FROM {rel})"
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE _co_ids AS SELECT filename, file_row_number "
                    f"FROM ({duckdb_sql(narrow, rule, window, exporters=exporters)})")
        con.execute(f"COPY (SELECT s.* EXCLUDE (date, filename, file_row_number) FROM {rel} s "
                    f"SEMI JOIN _co_ids USING (filename, file_row_number)) TO {target}")
    finally:
        con.execute("DROP TABLE IF EXISTS _co_ids")


def counted_parquet(con, files: list[str], cfg, out_dir, passes: int | None = None,
                    report: dict | None = None) -> list[str]:
    """The day's flow files `files` (hive paths hour=NN) as the config's rule counts them:
    `files` unchanged for `all`, else Parquet files of the counted rows under `out_dir`, in
    hive paths hour=N as the local engines read them (the Go top-talkers kernel, DuckDB).

    The rule matches observations within a flow key only, so a day larger than DuckDB's
    memory limit (`[site] dedup_memory_mb`) is counted in `passes` passes (default: as many
    as the limit needs, passes_for), each over the keys of one hash bucket: exact, and each
    pass's windows hold a bucket's rows, not the day's: the day is first written once split
    by bucket (beside `out_dir`, removed after), so each pass reads only its bucket.
    `report`, if given, receives what the pass did (rule, observations, passes, memory_limit)."""
    import logging  # noqa: PLC0415
    import shutil  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415  (only for the local engines)

    rule, window = settings(cfg)
    if rule == "all" or not files:
        return list(files)
    listed = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
    source = f"read_parquet([{listed}], hive_partitioning = true, union_by_name = true)"
    target = str(out_dir).replace("'", "''")
    rows = con.execute(f"SELECT count(*) FROM {source}").fetchone()[0]
    limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    if passes is None:
        passes = passes_for(rows, memory_limit_bytes(con, limit))
        if passes > 1:
            logging.getLogger("flowlake.count_once").info(
                "count once (%s): %d observations in %d passes of one key bucket each (DuckDB memory_limit %s)",
                rule, rows, passes, limit)
    if report is not None:
        report.update(rule=rule, observations=int(rows), passes=int(passes), memory_limit=limit)
    if passes == 1:
        _copy_counted(con, source.removesuffix(")") + f", {_ROW_ID})", rule, window,
                      f"'{target}' (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (hour))")
        return sorted(str(p) for p in Path(out_dir).glob("hour=*/*.parquet"))
    rel = duckdb_relation(con, source)
    # the day once, split by hash bucket of the flow key (a partitioned write needs no window);
    # then one pass per bucket reads its rows only. Each exporter's ingress flag comes from
    # the whole day.
    staged = Path(out_dir).parent / f"{Path(out_dir).name}.buckets"
    key = ", ".join(KEY)
    try:
        con.execute(f"COPY (SELECT *, hash({key}) % {passes} AS _co_bucket FROM {rel}) TO "
                    f"'{str(staged).replace(chr(39), chr(39) * 2)}' (FORMAT parquet, PARTITION_BY (_co_bucket))")
        # what each exporter exports on, from the whole day, once (not re-read by every pass)
        con.execute("CREATE OR REPLACE TEMP TABLE _co_exporters AS "
                    f"SELECT DISTINCT exporter, flow_direction FROM {rel}")
        for b in range(passes):
            files = sorted(str(p).replace("'", "''") for p in (staged / f"_co_bucket={b}").glob("*.parquet"))
            if not files:
                continue
            bucket = "read_parquet([" + ", ".join(f"'{f}'" for f in files) + f"], hive_partitioning = false, {_ROW_ID})"
            _copy_counted(con, bucket, rule, window,
                          f"'{target}' (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (hour), OVERWRITE_OR_IGNORE, "
                          f"FILENAME_PATTERN 'pass{b}_{{i}}')", exporters="_co_exporters")
    finally:
        shutil.rmtree(staged, ignore_errors=True)
        con.execute("DROP TABLE IF EXISTS _co_exporters")
    return sorted(str(p) for p in Path(out_dir).glob("hour=*/*.parquet"))
