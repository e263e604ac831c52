"""Delta Lake tables (issue 38): the pieces the lake's switch to Delta builds on.

Nothing in the stack uses this module yet: the lake is still plain Parquet with its own
table layer (pipelines/lake_writer.py, compact.py, lake_snapshot.py). What is here is
what each of those becomes (docs/design/delta-lake.md):

- `duckdb_load_delta(con)`: DuckDB's `delta` extension from the file the PyPI package
  `duckdb-extension-delta` ships (a plain `LOAD delta` tries to download it and fails
  offline); `delta_scan('<table>')` then reads the table's current version.
- `spark_conf()`: the settings a Spark session needs to read and write Delta (extension,
  catalog, the jars of .jars/delta that `make setup` fetches). flowlake/base/spark.py adds
  them only to a session that asks (`session(..., delta=True)`): off by default.
- `append_batch(...)`: the ingest's micro-batch as one commit carrying an application
  transaction (app id, batch id). A replayed batch finds its id committed and is a no-op:
  the table's own exactly-once, in place of staging folders and done-markers.
- `replace_partition(...)`: one hour (or day) replaced by new rows in one commit, and
  `commit_partition_files(...)`: files the caller wrote itself (the compactor's sorted
  files, its own encodings) committed as the partition's replacement. Readers see the
  old version or the new, never both: in place of the hour swap and retired folders.
- `delete_partitions(...)` + `vacuum(...)`: retention as a table operation; VACUUM's
  retention is the grace an older version stays readable (today's retired folders).
- `version_files(...)`: the data files of one version, for readers that take a file list
  (the Go top-talkers kernel) in place of a pinned snapshot.
- `convert_in_place(...)`: a folder of today's layout made a table without moving a file
  (`flowlake lake migrate`'s step per table), rows counted before and after.

A DuckDB connection that loaded the extension must be closed before the process exits:
left open at exit, the process aborted in 4 of 6 runs of one script ("terminate called
without an active exception", exit status 134; DuckDB 1.4.1, duckdb-extension-delta
1.4.1; timing-dependent: 0 of 8 later). `duckdb_load_delta` closes the connections it
loaded into at exit (atexit), for callers that forget.
"""
from __future__ import annotations

import atexit
import datetime as dt
import json
import weakref
from pathlib import Path

from flowlake.base import config as _config

JARS_DIR = _config.REPO_ROOT / ".jars" / "delta"
# What a Spark session needs for Delta's SQL (DELETE, OPTIMIZE, VACUUM, time travel) and
# its DataFrame reader/writer (format("delta")).
SPARK_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


class DeltaSetupError(RuntimeError):
    """A piece Delta needs is not installed here (`make setup` installs it)."""


# ---- DuckDB ------------------------------------------------------------------------------
def duckdb_extension_file(duckdb_version: str) -> Path:
    """The delta extension built for `duckdb_version` ("1.4.1" or "v1.4.1") in the
    duckdb-extension-delta package, or DeltaSetupError saying what to install."""
    version = duckdb_version.removeprefix("v")
    try:
        import duckdb_extension_delta  # noqa: PLC0415  (optional: only readers of Delta tables need it)
    except ImportError:
        raise DeltaSetupError(f"the Python package duckdb-extension-delta=={version} is not installed: "
                              "run `make setup` (requirements.txt pins it to the DuckDB version)") from None
    package = Path(duckdb_extension_delta.__file__).resolve().parent
    path = package / "extensions" / f"v{version}" / "delta.duckdb_extension"
    if not path.is_file():
        found = sorted(p.name for p in path.parent.parent.glob("v*"))
        raise DeltaSetupError(f"no DuckDB delta extension for DuckDB {version} at {path} (the package has "
                              f"{', '.join(found) or 'none'}): install duckdb-extension-delta=={version}")
    return path


_LOADED: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_loaded() -> None:
    for con in list(_LOADED):
        try:
            con.close()
        except Exception:  # noqa: BLE001, S110 - at exit: nothing to report to
            pass


def duckdb_load_delta(con) -> Path:
    """Load the delta extension into the DuckDB connection `con` from the package's file
    (nothing is downloaded); returns the file. `delta_scan('<table dir>')` then reads a
    table's current version, and `ATTACH '<table dir>' AS t (TYPE delta, VERSION n)` an
    older one."""
    version = con.execute("SELECT version()").fetchone()[0]
    path = duckdb_extension_file(version)
    con.execute("LOAD '" + str(path).replace("'", "''") + "'")
    try:
        _LOADED.add(con)
    except TypeError:  # a wrapper without weak references: the caller closes it
        pass
    return path


# ---- Spark -------------------------------------------------------------------------------
def spark_jars() -> list[str]:
    """The jars of .jars/delta (delta-spark, delta-storage), or DeltaSetupError."""
    jars = sorted(str(p) for p in JARS_DIR.glob("*.jar"))
    if not any(Path(j).name.startswith("delta-spark_") for j in jars):
        raise DeltaSetupError(f"no delta-spark jar in {JARS_DIR}: run `make setup` (jvm/delta/pom.xml)")
    return jars


def spark_conf() -> dict[str, str]:
    """The settings flowlake/base/spark.py adds to a session asked for Delta. The jars are
    listed under the key "delta.jars" (spark.py appends them to spark.jars)."""
    return {**SPARK_SETTINGS, "delta.jars": ",".join(spark_jars())}


# ---- writes ------------------------------------------------------------------------------
def _deltalake():
    try:
        import deltalake  # noqa: PLC0415  (start-up: deltalake; only Delta writers need it)
    except ImportError:
        raise DeltaSetupError("the Python package deltalake is not installed: run `make setup`") from None
    return deltalake


def _as_table(data):
    """An Arrow table of `data` (a table, record batches, or a stream read whole): a write
    that goes round after a conflict needs its rows a second time."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

    if isinstance(data, pa.Table):
        return data
    if hasattr(data, "read_all"):
        return data.read_all()
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    return pa.table(data)


def committed_version(table_uri: str | Path, app_id: str) -> int | None:
    """The last batch version committed under `app_id`, or None (none, or no table yet)."""
    dl = _deltalake()
    if not dl.DeltaTable.is_deltatable(str(table_uri)):
        return None
    return dl.DeltaTable(str(table_uri)).transaction_version(app_id)


def append_batch(table, data, app_id: str, version: int, partition_by: list[str] | None = None,
                 writer_properties=None, retries: int = 3) -> bool:
    """Append `data` (an Arrow table, batch or stream) as batch `version` of the writer `app_id`,
    in one commit that records the pair (a Delta application transaction). Returns True
    when committed, False when the table already holds this batch (a replay: nothing is
    written). Versions of one app id only grow (Spark's batch ids do).

    `table`: the table's path/URI, or a deltalake.DeltaTable a long-running writer keeps
    (brought up to date here, incrementally: reading the log anew at every batch costs
    more with every commit until the next checkpoint, bench/delta_lake.py).

    Two writers racing with the same batch: the loser's commit fails the conflict check
    (it was made on the version it checked), finds the batch committed and returns False."""
    dl = _deltalake()
    if version < 0:
        raise ValueError(f"batch version {version} of {app_id!r}: must be >= 0")
    data = _as_table(data)
    kept = table if isinstance(table, dl.DeltaTable) else None
    uri = kept.table_uri if kept is not None else str(table)
    for attempt in range(retries + 1):
        # The check and the commit on one snapshot: the commit is made at the version after
        # the one checked, so a concurrent commit in between fails it (no rebase: retries 0)
        # and the next round sees that commit's transaction. delta-rs does not itself refuse
        # a second commit of a committed (app id, version) (delta-io/delta-rs#2580).
        if kept is not None:
            kept.update_incremental()
            current = kept
        else:
            current = dl.DeltaTable(uri) if dl.DeltaTable.is_deltatable(uri) else None
        last = current.transaction_version(app_id) if current is not None else None
        if last is not None and version <= last:
            return False
        try:  # no table yet: create it with this batch ("error": a concurrent creator wins, we go round)
            dl.write_deltalake(current if current is not None else uri, data,
                               mode="append" if current is not None else "error", partition_by=partition_by,
                               writer_properties=writer_properties,
                               commit_properties=dl.CommitProperties(
                                   app_transactions=[dl.Transaction(app_id, version)], max_commit_retries=0))
            return True
        except (dl.exceptions.CommitFailedError, dl.exceptions.DeltaError) as exc:
            if attempt == retries or (current is not None and not isinstance(exc, dl.exceptions.CommitFailedError)):
                raise
    return False  # not reached


def partition_predicate(values: dict) -> str:
    """`{"date": "2026-11-20", "hour": 3}` -> `date = '2026-11-20' AND hour = 3` (delta-rs SQL)."""
    if not values:
        raise ValueError("a partition needs at least one column = value")
    parts = []
    for col, value in values.items():
        if not str(col).isidentifier():
            raise ValueError(f"partition column {col!r} is not a plain name")
        if isinstance(value, bool) or not isinstance(value, (int, str, dt.date)):
            raise ValueError(f"partition {col} = {value!r}: a string, date or integer")
        text = str(value) if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"
        parts.append(f"{col} = {text}")
    return " AND ".join(parts)


def _check_rows_in(data, values: dict) -> None:
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
    import pyarrow.compute as pc  # noqa: PLC0415  (start-up: pyarrow)

    table = _as_table(data)
    for col, value in values.items():
        if col not in table.column_names:
            raise ValueError(f"the rows for partition {partition_predicate(values)} lack the column {col!r}")
        column = table.column(col)
        bad = pc.sum(pc.invert(pc.fill_null(pc.equal(column, pa.scalar(value, column.type)), False))).as_py() or 0
        if bad:
            raise ValueError(f"{bad} of {table.num_rows} rows are not in partition {partition_predicate(values)}")


def replace_partition(table_uri: str | Path, data, partition: dict, read_version: int,
                      partition_by: list[str] | None = None, writer_properties=None,
                      target_file_size: int | None = None) -> None:
    """Replace every row of `partition` ({"date": ..., "hour": ...}) by `data` in one
    commit (the old files stay until VACUUM, so readers of the older version keep
    reading). Rows outside the partition are refused, before anything is written.

    `read_version`: the table version `data` was derived from. The commit is made on it:
    if another commit added rows to the partition since (a late batch), the commit fails
    with deltalake's CommitFailedError ("a concurrent transaction added new data") and
    nothing is lost: redo the replace from the newer version. Written on the newest
    version instead, the replace would silently drop those rows."""
    dl = _deltalake()
    data = _as_table(data)
    _check_rows_in(data, partition)
    dl.write_deltalake(dl.DeltaTable(str(table_uri), version=read_version), data, mode="overwrite",
                       predicate=partition_predicate(partition), partition_by=partition_by,
                       writer_properties=writer_properties, target_file_size=target_file_size)


def _stat_value(value):
    if isinstance(value, dt.datetime):
        value = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (bytes, float)):
        return None  # binary, and floats (NaN bounds): no statistics, never a wrong skip
    return value


def file_stats(path: Path) -> str:
    """Delta's per-file statistics (numRecords, minValues, maxValues, nullCount) from a
    Parquet file's footer, as JSON: what lets readers skip a file on a filter."""
    import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: pyarrow)

    md = pq.ParquetFile(path).metadata
    mins: dict = {}
    maxs: dict = {}
    nulls: dict = {}
    for c in range(md.num_columns):
        name = md.schema.column(c).path
        if "." in name:
            continue  # nested columns: no statistics (Delta keeps them per leaf, by struct)
        lo = hi = None
        nn: int | None = 0
        usable = True
        for g in range(md.num_row_groups):
            rows, st = md.row_group(g).num_rows, md.row_group(g).column(c).statistics
            if st is None:
                usable, nn = False, None
                break
            nn = nn + st.null_count if nn is not None and st.has_null_count else None
            if not st.has_min_max:
                usable = usable and st.has_null_count and st.null_count == rows  # all null: no bound
                continue
            a, b = _stat_value(st.min), _stat_value(st.max)
            if a is None or b is None:
                usable = False
                continue
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
        if usable and lo is not None:
            mins[name], maxs[name] = lo, hi
        if nn is not None:
            nulls[name] = nn
    return json.dumps({"numRecords": md.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


def ensure_table(table_uri: str | Path, schema, partition_by: list[str], properties: dict[str, str] | None = None):
    """The Delta table at `table_uri`, created empty with `schema` (Arrow, partition
    columns included) when there is none yet; deletion vectors off (file-list readers
    cannot express them). A concurrent creator wins: its table is returned.
    `properties`: table properties to hold (log_properties: the log's bounds), set on an
    existing table whose own differ."""
    dl = _deltalake()
    uri = str(table_uri)
    if not dl.DeltaTable.is_deltatable(uri):
        Path(uri).mkdir(parents=True, exist_ok=True)
        try:
            dl.DeltaTable.create(uri, schema, mode="error", partition_by=partition_by,
                                 configuration={"delta.enableDeletionVectors": "false", **(properties or {})})
        except dl.exceptions.DeltaError:
            if not dl.DeltaTable.is_deltatable(uri):
                raise
    elif properties:
        set_properties(uri, properties)
    table = dl.DeltaTable(uri)
    have = {f.name for f in table.schema().fields}
    new = [f for f in dl.Schema.from_arrow(schema).fields if f.name not in have]
    if new:  # schema evolution: columns a later record revision added; older files read them as null
        table.alter.add_columns(new)
        table = dl.DeltaTable(uri)
    return table


def _add_action(root: Path, f: Path, partition: dict):
    from deltalake.transaction import AddAction  # noqa: PLC0415  (start-up: deltalake)

    st = f.stat()
    return AddAction(str(f.relative_to(root)), st.st_size, {k: str(v) for k, v in partition.items()},
                     int(st.st_mtime * 1000), True, file_stats(f))


def commit_batch_files(table_uri: str | Path, files: list[tuple[Path, dict]], schema, partition_by: list[str],
                       app_id: str, version: int, metadata: dict | None = None, retries: int = 5) -> bool:
    """Commit Parquet files the ingest's tasks wrote into the table's partition folders
    (`files`: (path, {"date": d, "hour": h})) as batch `version` of `app_id`, in one commit
    carrying the pair and `metadata` (the batch's counters, commit's custom metadata).
    Returns False when the table already holds the batch (a replay: nothing committed).
    The check and the commit are made on one snapshot with no rebase (as append_batch):
    a concurrent commit fails ours, and the next round sees its transaction."""
    dl = _deltalake()
    if version < 0:
        raise ValueError(f"batch version {version} of {app_id!r}: must be >= 0")
    root = Path(table_uri)
    actions = [_add_action(root, Path(f), part) for f, part in files]
    for attempt in range(retries + 1):
        table = ensure_table(root, schema, partition_by)
        last = table.transaction_version(app_id)
        if last is not None and version <= last:
            return False
        try:
            table.create_write_transaction(
                actions, mode="append", schema=table.schema(), partition_by=partition_by,
                commit_properties=dl.CommitProperties(
                    app_transactions=[dl.Transaction(app_id, version)], max_commit_retries=0,
                    custom_metadata={k: str(v) for k, v in (metadata or {}).items()} or None))
            return True
        except dl.exceptions.CommitFailedError:
            if attempt == retries:
                raise
    return False  # not reached


def commit_partition_files(table_uri: str | Path, files: list[Path], partition: dict, schema,
                           partition_by: list[str], read_version: int, folder: Path | None = None) -> None:
    """Commit Parquet files the caller wrote under the table's partition folder as the
    replacement of the partition's files at `read_version` (the version the caller read
    them from): one commit removes those files (still readable by older versions until
    VACUUM) and adds `files`. A file committed to the partition after `read_version` (a
    late batch) is not removed: its rows stay beside the replacement. The compactor writes
    its sorted files with its own encodings and row groups this way. `schema`: the
    table's Arrow schema (partition columns included)."""
    dl = _deltalake()
    from deltalake.transaction import AddAction  # noqa: PLC0415  (start-up: deltalake)

    root = Path(table_uri).resolve()
    part_dir = Path(folder).resolve() if folder is not None else root.joinpath(
        *(f"{k}={v}" for k, v in partition.items()))
    if part_dir.parent != root and not part_dir.is_relative_to(root):
        raise ValueError(f"{part_dir}: not a folder of the table {root}")
    actions = []
    for f in map(Path, files):
        f = f.resolve()
        if f.parent != part_dir:
            raise ValueError(f"{f}: not in the partition's folder {part_dir}")
        st = f.stat()
        actions.append(AddAction(str(f.relative_to(root)), st.st_size, {k: str(v) for k, v in partition.items()},
                                 int(st.st_mtime * 1000), True, file_stats(f)))
    dl.DeltaTable(str(root), version=read_version).create_write_transaction(
        actions, mode="overwrite", schema=schema, partition_by=partition_by,
        partition_filters=[(k, "=", str(v)) for k, v in partition.items()])


def delete_partitions(table_uri: str | Path, partitions: list[dict]) -> int:
    """Remove the rows of whole partitions in one commit (retention's expired days);
    returns the rows removed. Their files go at the next VACUUM past its retention."""
    if not partitions:
        return 0
    dl = _deltalake()
    predicate = " OR ".join(f"({partition_predicate(p)})" for p in partitions)
    return int(dl.DeltaTable(str(table_uri)).delete(predicate).get("num_deleted_rows", 0))


def vacuum(table_uri: str | Path, retain_hours: int, dry_run: bool = False, full: bool = False) -> list[str]:
    """Delete data files no version younger than `retain_hours` needs (files removed by a
    compaction, a replace or a DELETE that long ago); returns them. `retain_hours` is the
    time a reader of an older version can still read it (today's retired_grace_minutes,
    in whole hours: delta-rs takes hours). full: also files no version lists at all (a
    batch or a compaction that died, or lost a conflict, before its commit), older than
    `retain_hours` too."""
    if retain_hours < 0:
        raise ValueError(f"VACUUM retention {retain_hours} h: must be >= 0")
    dl = _deltalake()
    return dl.DeltaTable(str(table_uri)).vacuum(retention_hours=retain_hours, dry_run=dry_run,
                                                enforce_retention_duration=False, full=full)


class AsOfError(ValueError):
    """A version or time to read a table as of that the table cannot answer (the message
    names the table, the input and what it can read instead)."""


def _commit_times(table) -> list[tuple[int, dt.datetime]]:
    """(version, commit time) of every version the table's log still holds, oldest first."""
    out = []
    for h in table.history():
        ts = h.get("timestamp")
        if ts is not None and h.get("version") is not None:
            out.append((int(h["version"]), dt.datetime.fromtimestamp(int(ts) / 1000, dt.UTC)))
    return sorted(out)


def _readable(table_uri: str, version: int) -> bool:
    """Whether every data file of `version` is still on disk (VACUUM removes those of older
    versions once no newer version lists them)."""
    dl = _deltalake()
    try:
        table = dl.DeltaTable(table_uri, version=version)
    except Exception:  # noqa: BLE001 - the log no longer reaches it: not readable
        return False
    return all(Path(u.removeprefix("file://")).exists() for u in table.file_uris())


def resolve_as_of(table_uri: str | Path, as_of: int | dt.datetime) -> int:
    """The version of the table to read for `as_of`: an int is a version (it must exist
    and its files must not have been vacuumed), a datetime the newest version committed at
    or before it. AsOfError names the table and the input and says what can be read."""
    dl = _deltalake()
    uri = str(table_uri)
    table = dl.DeltaTable(uri)
    newest = table.version()
    times = _commit_times(table)
    oldest = times[0][0] if times else 0
    if isinstance(as_of, dt.datetime):
        when = as_of if as_of.tzinfo else as_of.replace(tzinfo=dt.UTC)
        earlier = [v for v, t in times if t <= when]
        if not earlier:
            since = (f"its oldest version {oldest} was committed {times[0][1]:%Y-%m-%dT%H:%M:%S%z}" if times
                     else "its log holds no commit times")
            raise AsOfError(f"{uri} has no version at or before {when:%Y-%m-%dT%H:%M:%S%z}: {since}")
        version = earlier[-1]
    else:
        version = int(as_of)
        if version < 0 or version > newest:
            raise AsOfError(f"{uri} has no version {version}: its versions are {oldest} to {newest}")
    if not _readable(uri, version):
        lo, hi = version + 1, newest  # the oldest readable version: binary search above this one
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if _readable(uri, mid) else (mid + 1, hi)
        raise AsOfError(f"{uri} version {version} is no longer readable (its log entry or data files were "
                        f"removed by VACUUM/log cleanup): the oldest version available is {lo}")
    return version


def version_files(table_uri: str | Path, version: int | None = None,
                  partition_filters: list[tuple] | None = None) -> tuple[int, list[str]]:
    """(version, its data files' paths) of the table at `version` (default the newest),
    optionally only partitions matching `partition_filters` ([("date", "=", "2026-11-20")]).
    A reader handed this list reads one consistent version while VACUUM keeps the files."""
    dl = _deltalake()
    table = dl.DeltaTable(str(table_uri), version=version)
    return table.version(), [u.removeprefix("file://") for u in table.file_uris(partition_filters)]


# ---- the log's bounds ----------------------------------------------------------------------
# A table's _delta_log grows by one JSON file per commit (8,640 a day for the ingest at a
# 10 s trigger). delta-rs writes a checkpoint (the table's state in one Parquet file) every
# `delta.checkpointInterval` commits, and when it does, deletes the commit files and older
# checkpoints older than `delta.logRetentionDuration` (`delta.enableExpiredLogCleanup`):
# so the log holds about log retention x commit rate files, and time travel reaches back at
# most that far (and only as far as VACUUM left the data files).
def log_properties(checkpoint_interval: int, log_retention_hours: float) -> dict[str, str]:
    """The table properties that bound a table's log ([lake] checkpoint_interval,
    log_retention_hours); ValueError naming the key for a bad value."""
    if isinstance(checkpoint_interval, bool) or not isinstance(checkpoint_interval, int) or checkpoint_interval < 1:
        raise ValueError(f"config [lake] checkpoint_interval = {checkpoint_interval!r}: a whole number of commits >= 1")
    if isinstance(log_retention_hours, bool) or not isinstance(log_retention_hours, (int, float)) \
            or log_retention_hours < 1 or log_retention_hours != int(log_retention_hours):
        raise ValueError(f"config [lake] log_retention_hours = {log_retention_hours!r}: a whole number of hours >= 1")
    return {"delta.checkpointInterval": str(checkpoint_interval),
            "delta.logRetentionDuration": f"interval {int(log_retention_hours)} hours",
            "delta.enableExpiredLogCleanup": "true"}


def set_properties(table_uri: str | Path, properties: dict[str, str]) -> dict[str, str]:
    """Set the table properties of `properties` that the table holds otherwise (one
    commit, none when all are equal); returns those set."""
    dl = _deltalake()
    table = dl.DeltaTable(str(table_uri))
    have = table.metadata().configuration or {}
    changed = {k: v for k, v in properties.items() if have.get(k) != v}
    if changed:
        table.alter.set_table_properties(changed, raise_if_not_exists=False)
    return changed


def _log_version(name: str) -> int | None:
    head = name.split(".", 1)[0]
    return int(head) if len(head) == 20 and head.isdigit() else None


def log_status(table_uri: str | Path) -> dict:
    """What a table's `_delta_log/` holds: the newest version, its files and bytes, the
    last checkpoint (version and when), the oldest version the log can still rebuild and
    the oldest still readable (its data files not vacuumed), and the bounds the table's
    properties set (checkpoint interval, log retention; Delta's defaults when unset)."""
    dl = _deltalake()
    root = Path(table_uri)
    log = root / "_delta_log"
    commits: list[int] = []
    checkpoints: list[int] = []
    files = size = 0
    for p in log.iterdir():
        if not p.is_file():
            continue
        files += 1
        size += p.stat().st_size
        v = _log_version(p.name)
        if v is None:
            continue
        if p.name.endswith(".json") and p.name.count(".") == 1:
            commits.append(v)
        elif ".checkpoint." in p.name:
            checkpoints.append(v)
    last = None
    marker = log / "_last_checkpoint"
    if marker.is_file():
        try:
            v = int(json.loads(marker.read_text())["version"])
            when = dt.datetime.fromtimestamp(marker.stat().st_mtime, dt.UTC)
            last = {"version": v, "at": when.strftime("%Y-%m-%dT%H:%M:%SZ")}
        except (ValueError, KeyError, OSError):
            last = None
    table = dl.DeltaTable(str(root))
    newest = table.version()
    conf = table.metadata().configuration or {}
    # the log rebuilds version v from a checkpoint at or before v, or from commit 0 on
    have = set(commits)
    starts = sorted(set(checkpoints) | ({0} if 0 in have else set()))
    oldest_log = next((c for c in starts if all(v in have for v in range(c + 1, newest + 1))), newest)
    lo, hi = oldest_log, newest  # oldest readable: VACUUM removes the oldest versions' files first
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _readable(str(root), mid) else (mid + 1, hi)
    return {"version": newest, "log_files": files, "log_bytes": size, "commit_files": len(commits),
            "checkpoints": len(checkpoints), "last_checkpoint": last,
            "oldest_log_version": oldest_log, "oldest_readable_version": lo,
            "checkpoint_interval": int(conf.get("delta.checkpointInterval", 100)),
            "log_retention": conf.get("delta.logRetentionDuration", "interval 30 days (Delta's default)")}


# ---- migration -----------------------------------------------------------------------------
def _visible_parquet(table_dir: Path) -> tuple[list[Path], list[Path]]:
    """(the Parquet files today's readers read, those they skip): Spark and
    pipelines/duck.parquet_files skip paths with a part starting with "." or "_"."""
    shown, hidden = [], []
    for p in sorted(table_dir.rglob("*.parquet")):
        parts = p.relative_to(table_dir).parts
        if parts[0] == "_delta_log":
            continue
        (hidden if any(s.startswith((".", "_")) for s in parts) else shown).append(p)
    return shown, hidden


def _rows_by(con, source: str, column: str) -> dict[str, int]:
    return {str(k): int(n) for k, n in con.execute(f'SELECT "{column}", count(*) FROM {source} GROUP BY 1').fetchall()}


def convert_in_place(table_dir: str | Path, partition_columns: list[tuple[str, str]],
                     transactions: dict[str, int] | None = None, properties: dict[str, str] | None = None) -> dict:
    """Make a folder of today's lake layout (hive partitions, e.g. date=/hour=) a Delta
    table in place: one first commit lists the files that are there, nothing is rewritten
    or moved (only `_delta_log/` is added). `partition_columns`: [(name, Delta type), ...]
    ("string", "integer"), first the one rows are counted by. `transactions`: app id ->
    last batch version, recorded in that commit (the ingest's last done batch, so a replay
    of an older batch stays a no-op).

    Rows are counted per value of the first partition column before (DuckDB over the
    Parquet files, as today's readers read them) and after (delta_scan); unequal counts
    remove the `_delta_log/` made (the folder is plain Parquet again) and raise ValueError
    naming the table and the partition. A folder that already is a table is only counted
    again (a rerun); unequal counts there mean files were added the old way since.
    Deletion vectors are off on the table: file lists (the Go kernel) cannot express them.
    `properties`: further table properties (log_properties), in the first commit; a table
    that exists gets those it lacks (set_properties: one commit, none if all are there)."""
    import duckdb  # noqa: PLC0415  (start-up: duckdb)

    dl = _deltalake()
    root = Path(table_dir).resolve()
    if not root.is_dir():
        raise ValueError(f"{root}: no such folder")
    shown, hidden = _visible_parquet(root)
    if hidden:
        raise ValueError(f"{root}: {len(hidden)} Parquet files under hidden paths (no reader counts them today; "
                         f"the table would): move them out first, e.g. {hidden[0]}")
    if not shown:
        raise ValueError(f"{root}: no Parquet files to convert")
    first = partition_columns[0][0]
    con = duckdb.connect()
    try:
        files = "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in shown) + "]"
        before = _rows_by(con, f"read_parquet({files}, hive_partitioning = true, union_by_name = true)", first)
        existed = dl.DeltaTable.is_deltatable(str(root))
        if not existed:
            txns = [dl.Transaction(app, int(v)) for app, v in (transactions or {}).items()]
            dl.convert_to_deltalake(
                str(root), mode="error", partition_strategy="hive",
                partition_by=dl.Schema([dl.Field(name, kind) for name, kind in partition_columns]),
                configuration={"delta.enableDeletionVectors": "false", **(properties or {})},
                commit_properties=dl.CommitProperties(app_transactions=txns or None))
        elif properties:
            set_properties(root, properties)
        duckdb_load_delta(con)
        after = _rows_by(con, "delta_scan('" + str(root).replace("'", "''") + "')", first)
    finally:
        con.close()
    if after != before:
        wrong = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        detail = ", ".join(f"{first}={k}: {before.get(k, 0)} in the files, {after.get(k, 0)} in the table"
                           for k in wrong[:5])
        if not existed:
            import shutil  # noqa: PLC0415  (only on this error)

            shutil.rmtree(root / "_delta_log", ignore_errors=True)
            raise ValueError(f"{root}: conversion counted differently ({detail}); the table was removed, "
                             "the folder is plain Parquet again")
        raise ValueError(f"{root}: the Delta table and its folder's Parquet files differ ({detail}): files were "
                         "added without a commit (a flowlake of the old layout ran on it?)")
    return {"converted": not existed, "files": len(shown), "rows": sum(after.values()), "by": after,
            "version": dl.DeltaTable(str(root)).version()}
