"""Your own DuckDB over the lake, safe from compaction swaps: `duckdb_connect(home)`.

    from flowlake.lake import duckdb_connect
    con = duckdb_connect()            # $FLOWLAKE_HOME's lake (as the CLI resolves it), or duckdb_connect(home)
    con.execute(f"CREATE VIEW flows AS SELECT * FROM delta_scan('{con.lake}/flows')")   # a Delta table
    con.execute("SELECT count(*) FROM flows").fetchall()   # also .df(), .arrow(), .pl(), .fetchone() ...

Why: DuckDB lists a glob's files when a query starts and opens them while it scans. When
the compactor swaps an hour in between (pipelines/compact.py: one renameat2 exchange of
the hour's folder) the listed names are gone and the query fails with "IO Error: Cannot
open file ...: No such file or directory". It never counts wrong: a listing is all old
files or all new ones, and a read that cannot open a listed file fails as a whole. Running
the statement again lists the hour anew and is exact, so this connection does that, up to
SWAP_RETRIES times, reading the result inside the retry (DuckDB may report the error at
the first fetch, not at execute).

The retry (`run_retrying`) is shared with Superset's lake connection
(superset/superset_config.py, which loads this file by path: Superset's virtualenv has
DuckDB but not flowlake, so this module imports only the standard library and DuckDB at
the top). flowlake's own readers pin their files instead (pipelines/lake_snapshot.py).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import duckdb

SWAP_RETRIES = 3  # the compactor swaps an hour once as it closes (again after a late batch)
SWAP_RETRIED = {"statements": 0}  # how many statements met a swap (for tests and logs)
_LOG = logging.getLogger("flowlake.lake")


def vanished_lake_file(exc: Exception, lake_dir: str | os.PathLike | None) -> bool:
    """True when a DuckDB error is a file of the lake (any, without lake_dir) gone missing."""
    text = str(exc)
    lake = str(lake_dir or "").rstrip("/")
    return ("No such file or directory" in text or "No files found that match" in text) and (
        not lake or lake + "/" in text)


def run_retrying(attempt, lake_dir, reset=None, log: logging.Logger | None = None):
    """attempt() runs a statement and reads its whole result; when it fails because a lake
    file vanished (a compaction swap), call reset() (if given) and run it again."""
    for n in range(SWAP_RETRIES + 1):
        try:
            return attempt()
        except duckdb.IOException as exc:
            if n == SWAP_RETRIES or not vanished_lake_file(exc, lake_dir):
                raise
            SWAP_RETRIED["statements"] += 1
            (log or _LOG).warning("a lake file vanished during the read (compaction swapped its hour): "
                                  "running the statement again (%d/%d): %s", n + 1, SWAP_RETRIES,
                                  str(exc).splitlines()[0])
            if reset is not None:
                reset()


# What reads a whole result: run again as a whole when a lake file vanished.
_WHOLE = ("fetchall", "df", "fetchdf", "fetch_df", "arrow", "fetch_arrow_table", "pl", "fetchnumpy")


class LakeResult:
    """The result of one statement on a LakeConnection. Whole-result reads (fetchall, df,
    arrow, pl, fetchnumpy ...) rerun the statement if a lake file vanished under them;
    fetchone/fetchmany read every row once (inside the retry) and hand them out."""

    def __init__(self, con: LakeConnection, statement: str, parameters, cursor):
        self._con, self._statement, self._parameters = con, statement, parameters
        self._cursor = cursor  # executed, not yet read
        self._rows: list | None = None

    def _whole(self, method: str, *args, **kwargs):
        if self._rows is not None:  # already read (by fetchmany or a whole read): what is left
            if method == "fetchall":
                out, self._rows = self._rows, []
                return out
            raise duckdb.InvalidInputException(f"{method}(): this result was already read; execute the statement again")

        def attempt():
            cursor, self._cursor = self._cursor, None
            if cursor is None:  # a rerun: execute again
                cursor = self._con._execute(self._statement, self._parameters)
            return getattr(cursor, method)(*args, **kwargs)

        out = run_retrying(attempt, self._con.lake)
        self._rows = []
        return out

    def __getattr__(self, name: str):
        if name in _WHOLE:
            return lambda *a, **kw: self._whole(name, *a, **kw)
        raise AttributeError(f"{type(self).__name__} has no {name!r}: read it with fetchall(), df(), "
                             "arrow(), pl(), fetchnumpy(), fetchone() or fetchmany()")

    def fetchmany(self, size: int = 1) -> list:
        if self._rows is None:
            rows = self._whole("fetchall")
            self._rows = rows
        out, self._rows = self._rows[:size], self._rows[size:]
        return out

    def fetchone(self):
        rows = self.fetchmany(1)
        return rows[0] if rows else None

    @property
    def description(self):
        return self._con.raw.description


class LakeConnection:
    """A DuckDB connection whose statements rerun when compaction swapped a lake file away
    (see the module's docstring). Everything else (register, create_function, close, ...)
    is DuckDB's own; `raw` is the DuckDB connection, `lake` the lake's directory."""

    def __init__(self, raw: duckdb.DuckDBPyConnection, lake: Path):
        self.raw, self.lake = raw, Path(lake)
        self._last: LakeResult | None = None

    def _execute(self, statement: str, parameters=None):
        return self.raw.execute(statement) if parameters is None else self.raw.execute(statement, parameters)

    def execute(self, statement: str, parameters=None) -> LakeResult:
        cursor = run_retrying(lambda: self._execute(statement, parameters), self.lake)
        self._last = LakeResult(self, statement, parameters, cursor)
        return self._last

    sql = query = execute  # read at once, unlike DuckDB's lazy relations (a lazy scan could meet a swap unguarded)

    def __getattr__(self, name: str):
        if name in _WHOLE or name in ("fetchone", "fetchmany"):  # con.execute(q); con.fetchall()
            if self._last is None:
                raise duckdb.InvalidInputException("no open result set: execute a statement first")
            return getattr(self._last, name)
        return getattr(self.raw, name)

    def __enter__(self) -> LakeConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.raw.close()


def duckdb_connect(home: str | os.PathLike | None = None, config: dict | None = None) -> LakeConnection:
    """An in-memory DuckDB for reading the lake of `home` (default: $FLOWLAKE_HOME's, as the
    CLI resolves it) whose statements rerun when a compaction swap removed a file they had
    listed (the tables still of plain Parquet), with DuckDB's delta extension loaded:
    `delta_scan('<lake>/flows')` reads the flows table's current version.
    `config`: DuckDB settings (e.g. {"threads": 2})."""
    if home is None:
        # not at the top: Superset's virtualenv loads this file by path and has no flowlake
        from flowlake.base import config as flowlake_config  # noqa: PLC0415  (optional: not in Superset's venv)

        lake = flowlake_config.get().lake
    else:
        lake = Path(home).expanduser() / "lake"
    con = duckdb.connect(config=config or {})
    # lake/flows is a Delta table: `delta_scan('<lake>/flows')` reads its current version
    # (its folder also holds files of older versions and uncommitted ones: never glob it)
    from flowlake.base.delta import duckdb_load_delta  # noqa: PLC0415  (optional: not in Superset's venv)

    duckdb_load_delta(con)  # closed at exit (an open connection with the extension may abort the exit)
    return LakeConnection(con, lake)
