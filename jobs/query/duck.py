"""The embedded engine of `flowlake query` and `flowlake host`: DuckDB in this process.

Same answers as the Spark engine (stats.py, host.py), row for row (tests/jobs/test_query.py
pins both, and both to nfdump), from SQL over the lake's Parquet files:
- only the date/hour folders the time window can touch are listed (lake.partitions);
- DuckDB reads only the columns a query names, and pushes the filter into the scan;
- a flow listing walks the hours in time order and stops at --limit, printing as it goes.
No Spark, pandas or pyarrow import: the whole command starts in about 0.1 s.
"""
from __future__ import annotations

import datetime as dt
import os
import threading
import time

from flowlake.pipelines.duck import sql_list
from flowlake.pipelines.lake_read import LakeReader

from .. import count_rule
from . import index, sql
from .lake import partitions
from .spec import AGG_KEYS, FLOW_COLUMNS, RECORD_KEYS, STAT_KEYS, with_shares

SPAN_S = "(CAST(epoch_ms(last_seen) - epoch_ms(first_seen) AS DOUBLE) / 1000.0)"
# nfdump's rates over an aggregate's span, as stats._measures computes them on Spark
RATES = (f"{SPAN_S} AS duration_s, "
         f"CASE WHEN {SPAN_S} > 0 THEN CAST(floor(CAST(packets AS DOUBLE) / {SPAN_S}) AS BIGINT) ELSE 0 END AS pps, "
         f"CASE WHEN {SPAN_S} > 0 THEN CAST(floor(CAST(bytes * 8 AS DOUBLE) / {SPAN_S}) AS BIGINT) ELSE 0 END AS bps, "
         "CASE WHEN packets > 0 THEN CAST(floor(CAST(bytes AS DOUBLE) / CAST(packets AS DOUBLE)) AS BIGINT) "
         "ELSE 0 END AS bpp")
SUMS = ("count(*) AS flows, CAST(sum(packets) AS BIGINT) AS packets, CAST(sum(bytes) AS BIGINT) AS bytes, "
        "min(time_start) AS first_seen, max(time_end) AS last_seen")
# results carry UTC wall-clock times without a zone, as Spark's rows do (no pytz import)
TIMES_OUT = "CAST(first_seen AS TIMESTAMP) AS first_seen, CAST(last_seen AS TIMESTAMP) AS last_seen"


def duckdb_module():
    """DuckDB's compiled module itself when present: `import duckdb` also builds its DB-API
    type table and reads its version from the package metadata, ~60 ms of CPU per command
    (a fifth of nfdump's whole answer on a 3M-flow day). Same connect() and exceptions."""
    try:
        import _duckdb as mod  # noqa: PLC0415  (start-up: duckdb; optional: another packaging of DuckDB may lack _duckdb)
    except ImportError:  # another packaging of DuckDB
        import duckdb as mod  # noqa: PLC0415  (start-up: duckdb)
    return mod


class LakeReadError(RuntimeError):
    """DuckDB could not read the lake: a file is unreadable, or was replaced while read."""


class DuckEngine:
    name = "local"

    def __init__(self, cfg, start: dt.datetime | None = None, end: dt.datetime | None = None,
                 threads: int = 0, progress=None, use_index: bool = True, as_of=None,
                 count_at: str = "all", window_seconds: float = count_rule.DEFAULT_WINDOW_SECONDS):
        self.start, self.end, self.progress = start, end, progress
        # the counting rule (issue 34, jobs/count_rule.py): the window's flows as it counts them
        self.count_at, self.window_seconds = count_rule.check_rule(count_at, "--count-at"), float(window_seconds)
        # The window's hours at one table version (Delta) or pinned by hard links (Parquet)
        # until close(): a compaction during the query cannot take the files listed from
        # under DuckDB.
        self.snapshot = LakeReader(cfg.lake, as_of=as_of)  # as_of: --as-of's version or time
        hours = partitions(cfg.lake, start, end)
        lake = cfg.lake
        self.version, pinned = self.snapshot.files("flows", hours)
        root = self.snapshot.base("flows").parent  # the lake's (or its pinned copy's) root
        self._unpin = (str(root), str(lake))  # errors name the lake's file, not the link
        # each hour's files, also those in folders below it (one pass over the files:
        # a path test per hour and file was 30 ms of a day's 0.2 s answer)
        rel = {p: p.relative_to(lake) for p in hours}
        depth = len(next(iter(rel.values())).parts) if rel else 0
        skip = len(str(root)) + 1
        by_hour: dict[str, list[str]] = {}
        for f in pinned:
            by_hour.setdefault("/".join(f[skip:].split("/", depth)[:depth]), []).append(f)
        parts = [(p, by_hour.get(str(rel[p]), [])) for p in hours]
        # (hour folder, its Parquet files, its current index file or None)
        self.parts = [(p, f, index.lookup(cfg, p, f) if use_index else None) for p, f in parts if f]
        tmp = cfg.path("tmp", "duckdb")  # spills, as jobs/duck.connect
        tmp.mkdir(parents=True, exist_ok=True)
        self.con = duckdb_module().connect(config={"temp_directory": str(tmp),
                                                   "threads": int(threads) or os.cpu_count() or 1})
        self.con.execute("SET TimeZone = 'UTC'")
        if progress:  # DuckDB tracks progress only with its bar on; we draw it (stderr), not DuckDB
            self.con.execute("SET enable_progress_bar = true")
            self.con.execute("SET enable_progress_bar_print = false")
        else:  # DuckDB's own bar would print on stdout after 2 s (a whole day counted once takes that)
            self.con.execute("SET enable_progress_bar = false")
        self._types: dict[str, str] = {}
        self._attached: dict = {}

    # ---- sources --------------------------------------------------------------------
    def _files(self, parts=None) -> list[str]:
        return [f for _, files, _ in (self.parts if parts is None else parts) for f in files]

    def _bounds(self, kind: str, relation: str) -> str:
        """The time window on the raw time_start column (TIMESTAMP WITH TIME ZONE when pyarrow
        wrote the file, TIMESTAMP for Spark's INT96): a literal of the column's own type keeps
        the comparison pushed into the scan (row groups skipped by their statistics)."""
        if self.start is None and self.end is None:
            return "true"
        if kind not in self._types:
            self._types[kind] = self._exec(f"SELECT typeof(time_start) FROM {relation} LIMIT 1").fetchone()[0]
        typ = "TIMESTAMPTZ" if "TIME ZONE" in self._types[kind] else "TIMESTAMP"
        out = []
        if self.start is not None:
            out.append(f"time_start >= {typ} '{self.start:%Y-%m-%d %H:%M:%S.%f}'")
        if self.end is not None:
            out.append(f"time_start < {typ} '{self.end:%Y-%m-%d %H:%M:%S.%f}'")
        return " AND ".join(out)

    def _indexed(self, path) -> str | None:
        """The index file's table, attached once; None when the file cannot be attached
        (`flowlake query-index` dropped it since the lookup, or it is damaged): the hour is
        then read from its Parquet files, which are pinned and the truth."""
        if path not in self._attached:
            alias = f"ix{len(self._attached)}"
            try:
                self.con.execute(f"ATTACH {sql.quote(str(path))} AS {alias} (READ_ONLY)")
                self._attached[path] = f"{alias}.flows"
            except duckdb_module().Error:
                self._attached[path] = None
        return self._attached[path]

    def _source(self, parts=None, tree=None) -> str | None:
        """A subquery of the window's flows: indexed hours from their DuckDB files, the
        others from Parquet (None when no file is in the window). Columns of a later schema
        revision that the filter `tree` reads and the files lack come as NULL."""
        parts = self.parts if parts is None else parts
        later = sorted(sql.columns(tree) & set(sql.LATER_COLUMNS)) if tree is not None else []
        subs = []
        indexed = [(files, self._indexed(ix)) for _, files, ix in parts if ix is not None]
        plain = [f for _, files, ix in parts if ix is None for f in files]
        plain += [f for files, rel in indexed if rel is None for f in files]
        if plain:
            rel = f"read_parquet({sql_list(plain)}, union_by_name = true)"
            subs.append(f"SELECT *{self._missing(rel, later)} FROM {rel} WHERE {self._bounds('parquet', rel)}")
        for _, rel in indexed:
            if rel is not None:
                subs.append(f"SELECT *{self._missing(rel, later)} FROM {rel} WHERE {self._bounds('index', rel)}")
        return "(" + " UNION ALL BY NAME ".join(subs) + ")" if subs else None

    def _counted(self, tree=None) -> str | None:
        """The window's flows as the counting rule counts them (every hour: a flow's
        observations may lie on both sides of an hour's end); the plain source for `all`.
        A filter on the flow key alone (host, port, proto) is applied before the matching:
        exact, and the windows then sort only the keys asked about."""
        src = self._source(tree=tree)
        if src is None or self.count_at == "all":
            return src
        have = {r[0] for r in self._exec(f"DESCRIBE SELECT * FROM {src}").fetchall()}
        key_only = tree is not None and sql.columns(tree) and sql.columns(tree) <= set(count_rule.KEY)
        query = count_rule.duckdb_sql(count_rule.with_rule_columns(src, have), self.count_at, self.window_seconds,
                                      sql.to_sql(tree) if key_only else None)
        return f"({query})"

    def _missing(self, relation: str, columns: list[str]) -> str:
        """`, NULL AS col` for each of columns the relation lacks (asked only when a filter
        names such a column: a DESCRIBE reads the files' footers)."""
        if not columns:
            return ""
        have = {r[0] for r in self._exec(f"DESCRIBE SELECT * FROM {relation}").fetchall()}
        return "".join(f", CAST(NULL AS {sql.LATER_COLUMNS[c][0]}) AS {c}" for c in columns if c not in have)

    def _exec(self, query: str, label: str = "scanning"):
        duckdb = duckdb_module()
        try:
            if not self.progress:
                return self.con.execute(query)
            return self.progress.watch(lambda: self.con.execute(query), self.con.query_progress, label)
        except (duckdb.IOException, duckdb.InvalidInputException) as exc:
            first = str(exc).splitlines()[0].replace(*self._unpin)  # DuckDB appends the SQL: not for the analyst
            raise LakeReadError(f"cannot read the lake: {first} (`flowlake jobs run` quarantines unreadable files)") from None

    def _run(self, query: str, label: str = "scanning") -> list[dict]:
        res = self._exec(query, label)
        cols = [d[0] for d in res.description]
        return [dict(zip(cols, row)) for row in res.fetchall()]

    def _selected(self, tree, columns) -> str | None:
        src = self._counted(tree)
        if src is None:
            return None
        return f"(SELECT {', '.join(columns)} FROM {src} WHERE {sql.to_sql(tree)})"

    # ---- the engine's operations (same signatures as SparkEngine) -------------------
    def records(self, tree, limit: int = 0):
        """Flow records in time order, hour by hour; stops once `limit` rows came (0: all)."""
        where = sql.to_sql(tree)
        cols = ", ".join("CAST(time_start AS TIMESTAMP) AS time_start" if c == "time_start" else
                         "CAST(time_end AS TIMESTAMP) AS time_end" if c == "time_end" else c for c in FLOW_COLUMNS)
        if self.count_at != "all":  # one pass over the window: the rule matches across hours
            src = self._counted(tree)
            if src is not None:
                yield from self._run(f"SELECT {cols} FROM {src} WHERE {where} ORDER BY time_start, source_file, file_seq"
                                     + (f" LIMIT {int(limit)}" if limit else ""))
            return
        done = 0
        for i, part in enumerate(self.parts):
            if self.progress:
                self.progress.step(i, len(self.parts), f"{part[0].parent.name}/{part[0].name}")
            cap = f" LIMIT {limit - done}" if limit else ""
            rows = self._run(f"SELECT {cols} FROM {self._source([part], tree)} WHERE {where} "
                             f"ORDER BY time_start, source_file, file_seq{cap}")
            yield from rows
            done += len(rows)
            if limit and done >= limit:
                break
        if self.progress:
            self.progress.clear()

    def tops(self, tree, specs, n: int = 10) -> dict:
        """Several `-s` statistics: the filtered flows are read once into a temp table."""
        if len(specs) > 1:
            cols = {"packets", "bytes", "time_start", "time_end"}
            for key, _ in specs:
                cols |= set(STAT_KEYS.get(key, ())) | ({AGG_KEYS[k] for k in RECORD_KEYS} if key == "record" else set())
            sel = self._selected(tree, sorted(cols))
            if sel is None:
                return {f"{k}/{o}": [] for k, o in specs}
            self._exec(f"CREATE OR REPLACE TEMP TABLE selected AS {sel}")
            return {f"{k}/{o}": self._top("selected", k, o, n) for k, o in specs}
        (key, order), = specs
        return {f"{key}/{order}": self.top(tree, key, order, n)}

    def top(self, tree, key: str, order: str = "flows", n: int = 10) -> list[dict]:
        cols = ({AGG_KEYS[k] for k in RECORD_KEYS} if key == "record" else set(STAT_KEYS[key])) | {
            "packets", "bytes", "time_start", "time_end"}
        sel = self._selected(tree, sorted(cols))
        return [] if sel is None else self._top(sel, key, order, n)

    def _top(self, flows: str, key: str, order: str, n: int) -> list[dict]:
        """Rank groups as stats.top does (order desc, then val), with a top-N sort rather
        than a window over every group; totals from the groups (or the flows, when a flow
        counts under two values)."""
        sums_t = "count(*) AS t_flows, CAST(sum(packets) AS BIGINT) AS t_packets, CAST(sum(bytes) AS BIGINT) AS t_bytes"
        if key == "record" or len(STAT_KEYS[key]) == 1:
            if key == "record":  # concat_ws skips NULLs, so group by the keys themselves, as Spark does
                val = "concat_ws(' ', " + ", ".join(f"CAST({AGG_KEYS[k]} AS VARCHAR)" for k in RECORD_KEYS) + ")"
                group = ", ".join(AGG_KEYS[k] for k in RECORD_KEYS)
            else:
                val, group = f"CAST({STAT_KEYS[key][0]} AS VARCHAR)", "1"
            with_ = f"WITH g AS MATERIALIZED (SELECT {val} AS val, {SUMS} FROM {flows} GROUP BY {group})"
            totals = ("(SELECT sum(flows) AS t_flows, CAST(sum(packets) AS BIGINT) AS t_packets, "
                      "CAST(sum(bytes) AS BIGINT) AS t_bytes FROM g)")
        else:  # either column: a flow counts once under each value; the totals count it once
            a, b = STAT_KEYS[key]
            both = (f"SELECT CAST({a} AS VARCHAR) AS val, packets, bytes, time_start, time_end FROM f UNION ALL "
                    f"SELECT CAST({b} AS VARCHAR), packets, bytes, time_start, time_end FROM f")
            with_ = (f"WITH f AS MATERIALIZED (SELECT * FROM {flows}), "
                     f"g AS (SELECT val, {SUMS} FROM ({both}) GROUP BY val)")
            totals = f"(SELECT {sums_t} FROM f)"
        cap = f" LIMIT {int(n)}" if n else ""
        rows = self._run(f"""{with_}
            SELECT val, flows, packets, bytes, {TIMES_OUT}, duration_s, pps, bps, bpp,
                   CAST(t_flows AS BIGINT) AS t_flows, t_packets, t_bytes
            FROM (SELECT * FROM (SELECT *, {RATES} FROM g) ORDER BY {order} DESC, val{cap}), {totals}
            ORDER BY {order} DESC, val""")
        return [with_shares({"rank": i, **r}) for i, r in enumerate(rows, 1)]

    def aggregate(self, tree, keys: list[str], order: str = "flows", limit: int = 0) -> list[dict]:
        """`nfdump -A keys` (stats.aggregate)."""
        sel = self._selected(tree, sorted({AGG_KEYS[k] for k in keys} | {"packets", "bytes", "time_start", "time_end"}))
        if sel is None:
            return []
        group = ", ".join(f"{AGG_KEYS[k]} AS {k}" for k in keys)
        cap = f" LIMIT {int(limit)}" if limit else ""
        return self._run(f"""
            SELECT {', '.join(keys)}, flows, packets, bytes, {TIMES_OUT}, duration_s, pps, bps, bpp
            FROM (SELECT *, {RATES} FROM (SELECT {group}, {SUMS} FROM {sel} GROUP BY ALL))
            ORDER BY {order} DESC, {', '.join(keys)}{cap}""")

    def host(self, address: str, n: int = 10, nat_rows: int = 50) -> dict:
        """The host profile of host.profile, in SQL."""
        net = sql.host_net(address)
        src = self._source()
        empty = {"address": address, "flows": 0, "first_seen": None, "last_seen": None, "bytes_out": 0,
                 "bytes_in": 0, "packets": 0, "peers": 0, "top_peers": [], "top_ports": [], "hourly": [],
                 "nat": [], "nat_total": 0}
        if src is None:
            return empty
        nat, nat_total = self._nat(src, address, nat_rows)
        empty.update(nat=nat, nat_total=nat_total)
        is_src, is_dst = sql.address_in("src_addr", net), sql.address_in("dst_addr", net)
        self._exec(f"""CREATE OR REPLACE TEMP TABLE hf AS
            SELECT time_start, time_end, proto, packets, bytes,
                   CASE WHEN is_src THEN 'out' ELSE 'in' END AS role,
                   CASE WHEN is_src THEN dst_addr ELSE src_addr END AS peer,
                   CASE WHEN is_src THEN src_port ELSE dst_port END AS local_port,
                   CASE WHEN is_src THEN dst_port ELSE src_port END AS remote_port
            FROM (SELECT *, {is_src} AS is_src, {is_dst} AS is_dst FROM {src}) WHERE is_src OR is_dst""")
        out_b = "CAST(sum(CASE WHEN role = 'out' THEN bytes ELSE 0 END) AS BIGINT)"
        in_b = "CAST(sum(CASE WHEN role = 'in' THEN bytes ELSE 0 END) AS BIGINT)"
        totals = self._run(f"""SELECT count(*) AS flows, CAST(min(time_start) AS TIMESTAMP) AS first_seen,
            CAST(max(time_end) AS TIMESTAMP) AS last_seen, {out_b} AS bytes_out, {in_b} AS bytes_in,
            CAST(sum(packets) AS BIGINT) AS packets, count(DISTINCT peer) AS peers FROM hf""")[0]
        if not totals["flows"]:
            return empty
        peers = self._run(f"""SELECT peer, count(*) AS flows, CAST(sum(bytes) AS BIGINT) AS bytes,
            CAST(sum(packets) AS BIGINT) AS packets, {out_b} AS bytes_out, {in_b} AS bytes_in,
            count(DISTINCT remote_port) AS ports, CAST(min(time_start) AS TIMESTAMP) AS first_seen,
            CAST(max(time_end) AS TIMESTAMP) AS last_seen
            FROM hf GROUP BY peer ORDER BY bytes DESC, peer LIMIT {int(n)}""")
        ports = self._run(f"""SELECT proto, port, role, flows, bytes, peers FROM (
            SELECT proto, CASE WHEN role = 'out' THEN remote_port ELSE local_port END AS port, role,
                   count(*) AS flows, CAST(sum(bytes) AS BIGINT) AS bytes, count(DISTINCT peer) AS peers
            FROM hf GROUP BY ALL) ORDER BY flows DESC, bytes DESC, proto, port, role LIMIT {int(n)}""")
        hourly = self._run(f"""SELECT CAST(date_trunc('hour', time_start) AS TIMESTAMP) AS hour, count(*) AS flows,
            {out_b} AS bytes_out, {in_b} AS bytes_in, count(DISTINCT peer) AS peers
            FROM hf GROUP BY 1 ORDER BY 1""")
        return {"address": address, **totals, "top_peers": peers, "top_ports": ports, "hourly": hourly,
                "nat": nat, "nat_total": nat_total}

    def _nat(self, src: str, address: str, limit: int) -> tuple[list[dict], int]:
        """NAT translations of the address (jobs/query/nat.py); a lake from before the flow
        record's revision 3 has none (its files lack the columns: NULL)."""
        from .nat import COLUMNS, translations_sql  # noqa: PLC0415  (start-up: only for `flowlake host`)

        have = {r[0] for r in self._exec(f"DESCRIBE SELECT * FROM {src}").fetchall()}
        extra = "".join(f", CAST(NULL AS {t}) AS {c}" for c, (t, _) in COLUMNS.items() if c not in have)
        query, order = translations_sql(f"(SELECT *{extra} FROM {src})", address)
        self._exec(f"CREATE OR REPLACE TEMP TABLE nat AS {query}")
        total = self._run("SELECT count(*) AS n FROM nat")[0]["n"]
        rows = self._run(f"SELECT * FROM nat ORDER BY {order} LIMIT {int(limit)}") if limit else []
        return rows, total

    def close(self) -> None:
        self.con.close()
        self.snapshot.close()


class Progress:
    """Progress of a long scan on stderr, redrawn in place; silent for the first
    `delay` seconds so quick answers print nothing extra. Never on stdout."""

    def __init__(self, stream, delay: float = 0.5):
        self.stream, self.delay, self._shown = stream, delay, False

    def watch(self, call, percent, label: str):
        """Run call() in a worker thread, drawing percent() (DuckDB's query_progress) meanwhile."""
        box: dict = {}

        def work():
            try:
                box["result"] = call()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                box["error"] = exc

        t = threading.Thread(target=work, daemon=True)
        t0 = time.monotonic()
        t.start()
        while t.is_alive():
            t.join(0.1)
            if t.is_alive() and time.monotonic() - t0 >= self.delay:
                try:
                    p = percent()
                except Exception:  # noqa: BLE001 - progress is best effort
                    p = -1
                self._draw(f"{label}: {p:5.1f} %  {time.monotonic() - t0:5.1f} s" if p >= 0 else
                           f"{label}...  {time.monotonic() - t0:5.1f} s")
        self.clear()
        if "error" in box:
            raise box["error"]
        return box["result"]

    def step(self, i: int, total: int, what: str) -> None:
        self._draw(f"reading {what} ({i + 1}/{total})")

    def _draw(self, text: str) -> None:
        self.stream.write("\r\x1b[K" + text)
        self.stream.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False

