"""The flows stream's micro-batch: Kafka messages in, Parquet files in the lake out.

Spark's Kafka source fixes each micro-batch's offsets in the query's checkpoint; the batch's
DataFrame itself is never read. Instead one Spark task per topic partition reads that
partition's offset range straight from the broker (pipelines/batch_offsets.py: a plain
read_committed consumer in the Python worker), so message bytes never pass through the JVM
(its Kafka consumer, rows and the Arrow hand-off to Python were most of the JVM's CPU per
flow, bench/ingest.py). The task decodes the messages (FlowBatch messages without touching
a row, legacy one-flow Avro messages gathered into tables) and streams them into zstd
Parquet files of its own straight into the table's date=/hour= folders, one per date/hour, row groups of
`row_group_rows`. The driver collects only the files' names and counts, and any bad message
with its reason, then commits the batch's files to the Delta table lake/flows in one commit
carrying the transaction (APP_ID, batch id): a replayed batch id has the same offsets in
the checkpoint and finds its transaction committed, so it is a no-op.

A task's file names depend only on the batch and the task's partition, and files appear
under them only once complete (written as .tmp, then renamed), so a retried task
replaces its own files and never adds a second copy.
"""
from __future__ import annotations

import datetime as dt
import datetime as _dt
import logging
import os
import time
from pathlib import Path

from flowlake.collectors.lab import tag as lab_tag
from flowlake.collectors.lab.tag import registry_path
from flowlake.pipelines.batch_offsets import read_range
from flowlake.schemas.enrich import ENRICHMENT_NAMES

from . import lake_tables
from .batch_offsets import batch_ranges
from .lake_writer import quarantine_writer_for

log = logging.getLogger("flowlake.ingest")

RESULT_DDL = ("kind string, path string, rows long, messages long, offsets long, topic string, `partition` int, "
              "`offset` long, `timestamp` timestamp, key binary, value binary, reason string, "
              "task_seconds double, task_cpu double, write_seconds double")
# Arrow batches of Kafka rows handed to a task: FlowBatch messages are up to a few MB.
MESSAGES_PER_ARROW_BATCH = "8"
HOUR_MS = 3_600_000
# Parquet dictionary encoding only where values repeat (routers, interfaces, protocols,
# AS numbers, the file): on addresses, times and counters it costs CPU and saves nothing
# (2M flows: 1.0 CPU-s to write instead of 1.8, and 7% smaller).
DICTIONARY_COLUMNS = ["exporter", "input_if", "output_if", "proto", "tcp_flags", "tos", "sampling_rate",
                      "src_as", "dst_as", "source_file", "dst_prefix", "src_prefix", *ENRICHMENT_NAMES]
# No min/max statistics on the enrichment columns of ingest files: for a dictionary array
# the writer finds the values a row group references (a hash over every row's index, then
# the strings' min/max), 0.19 us a flow with enrichment off and 0.35 with it on (26 columns;
# in process, a 262k-row group), half of what enrichment cost the ingest. Files of random
# flows span every country and network in each row group, so those statistics skip nothing
# there; the compactor rewrites each closed hour sorted, with statistics on every column.
NO_STATISTICS = frozenset(ENRICHMENT_NAMES) | {"dst_prefix", "src_prefix"}


class HourFiles:
    """One Parquet file per UTC date/hour of time_start, written a row group at a time;
    `prepare` (decoded flows in, the file's columns out: enrichment, lab tag) runs once per
    row group, so its fixed costs per call are paid per row group, not per message."""

    def __init__(self, root: Path, stem: str, schema, row_group_rows: int, prepare=None):
        self.root, self.stem, self.schema, self.row_group_rows = root, stem, schema, row_group_rows
        self.prepare = prepare
        self.pending: dict[int, list] = {}
        self.pending_rows: dict[int, int] = {}
        self.writers: dict[int, object] = {}
        self.rows: dict[int, int] = {}
        self.write_seconds = 0.0  # Parquet encode + compress + write (the rest of a task is decode)

    def add(self, table) -> None:
        import numpy as np  # noqa: PLC0415  (start-up: numpy)
        import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

        if table.num_rows == 0:
            return
        hours = table.column("time_start").cast(pa.int64()).to_numpy() // HOUR_MS
        first = int(hours[0])
        if (hours == first).all():  # the usual case: a message within one hour
            self._queue(first, table)
            return
        for h in np.unique(hours):
            self._queue(int(h), table.filter(pa.array(hours == h)))

    def _queue(self, hour: int, table) -> None:
        self.pending.setdefault(hour, []).append(table)
        self.pending_rows[hour] = self.pending_rows.get(hour, 0) + table.num_rows
        if self.pending_rows[hour] >= self.row_group_rows:
            self._flush(hour)

    def _path(self, hour: int) -> Path:
        t = dt.datetime.fromtimestamp(hour * 3600, dt.timezone.utc)
        return self.root / f"date={t:%Y-%m-%d}" / f"hour={t.hour}" / f"{self.stem}.parquet"

    def _flush(self, hour: int) -> None:
        import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
        import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: pyarrow)

        tables = self.pending.pop(hour, [])
        self.pending_rows.pop(hour, None)
        if not tables:
            return
        table = pa.concat_tables(tables)
        if self.prepare:
            table = self.prepare(table)
        t0 = time.perf_counter()  # write_seconds: the Parquet write alone
        writer = self.writers.get(hour)
        if writer is None:
            path = self._path(hour)
            path.parent.mkdir(parents=True, exist_ok=True)
            # microsecond timestamps: the Delta table's timestamp type (older INT96 files of a
            # migrated lake and the compactor's ms files read as the same instants)
            writer = self.writers[hour] = pq.ParquetWriter(
                str(path) + ".tmp", self.schema, compression="zstd", coerce_timestamps="us",
                use_dictionary=[c for c in DICTIONARY_COLUMNS if c in self.schema.names],
                write_statistics=[c for c in self.schema.names if c not in NO_STATISTICS])
        # one dictionary per column and row group (enrichment columns are dictionary arrays):
        # a dictionary changing inside a column chunk would make the writer fall back to plain
        table = table.unify_dictionaries()
        writer.write_table(table, row_group_size=max(self.row_group_rows, table.num_rows))
        self.rows[hour] = self.rows.get(hour, 0) + table.num_rows
        self.write_seconds += time.perf_counter() - t0

    def close(self) -> list[tuple[str, int]]:
        for hour in list(self.pending):
            self._flush(hour)
        out = []
        t0 = time.perf_counter()
        for hour, writer in self.writers.items():
            writer.close()
            path = self._path(hour)
            os.replace(str(path) + ".tmp", path)
            out.append((str(path), self.rows[hour]))
        self.write_seconds += time.perf_counter() - t0
        return out


def land_messages(messages, staged: str, stem: str, row_group_rows: int, lab_runs: str = "", plan=None) -> list[dict]:
    """Decode a task's messages and write their flows as the staging folder's Parquet files.

    `messages`: (value, offset, meta) in offset order, meta() giving the quarantine columns
    (topic, partition, offset, timestamp, key) of a bad one. Returns the task's result rows
    (RESULT_DDL): one per file, one for the task, one per bad message."""
    from flowlake.pipelines.enrich import apply as enrich  # noqa: PLC0415  (start-up: numpy, pyarrow)
    from flowlake.pipelines.flow_messages import BAD, BATCH, FlowDecoder  # noqa: PLC0415  (start-up: pyarrow)

    wall0, cpu0 = time.perf_counter(), time.process_time()  # the worker's own time: where a batch goes
    decoder = FlowDecoder()
    runs = lab_tag.load(lab_runs) if lab_runs else {}
    lake = enrich.lake_tables(plan)
    files = HourFiles(Path(staged), stem, lab_tag.with_run_id(enrich.lake_schema()), row_group_rows,
                      prepare=lambda table: lab_tag.tag(lake(table), runs))
    legacy: list[dict] = []
    bad: list[dict] = []
    n = 0
    first = last = None  # offsets this task read (transaction markers between them count)
    for value, offset, meta in messages:
        first = offset if first is None else first
        last = offset
        kind, payload = decoder.decode(value)
        if kind == BATCH:
            n += 1
            files.add(payload)
        elif kind == BAD:
            bad.append({**meta(), "value": value, "reason": payload})
        else:
            n += 1
            legacy.append(payload)
            if len(legacy) >= 65536:
                files.add(decoder.rows_table(legacy))
                legacy = []
    if legacy:
        files.add(decoder.rows_table(legacy))
    out = [{"kind": "file", "path": path, "rows": rows} for path, rows in files.close()]
    out.append({"kind": "task", "messages": n, "offsets": 0 if first is None else last - first + 1,
                "task_seconds": time.perf_counter() - wall0, "task_cpu": time.process_time() - cpu0,
                "write_seconds": files.write_seconds})
    return out + [{"kind": "bad", **b} for b in bad]


def fetch_task(groups: list, kafka_conf: dict, staged: str, row_group_rows: int, lab_runs: str = "", plan=None,
               prefix: str = ""):
    """mapInArrow function over spark.range(len(groups)): task i reads the offset ranges
    groups[i] from the broker itself (pipelines/batch_offsets.py) and lands them. The JVM
    never holds a message."""

    def task(batches):
        import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
        from pyspark import TaskContext  # noqa: PLC0415  (start-up: pyspark)

        def messages(ranges):
            for r in ranges:
                for m in read_range(kafka_conf, r):
                    yield m.value(), m.offset(), lambda m=m: {
                        "topic": m.topic(), "partition": m.partition(), "offset": m.offset(), "key": m.key(),
                        "timestamp": _dt.datetime.fromtimestamp(m.timestamp()[1] / 1000, _dt.timezone.utc)}

        for rb in batches:
            for i in rb.column("id").to_pylist():
                out = land_messages(messages(groups[i]), staged, f"{prefix}part-{TaskContext.get().partitionId():05d}",
                                    row_group_rows, lab_runs, plan)
                # the ranges' length, not first..last read: markers at their ends count too
                next(o for o in out if o["kind"] == "task")["offsets"] = sum(r.end - r.start for r in groups[i])
                yield pa.RecordBatch.from_pylist(out, schema=_result_schema())

    return task


def group_ranges(ranges: list, tasks: int) -> list[list]:
    """At most `tasks` groups of about equal offsets (largest range first to the lightest group):
    one task per core rather than per partition, since a task's fixed costs (worker set-up,
    decoder, one Parquet file per hour) are paid per task (bench/ingest.py)."""
    groups: list[list] = [[] for _ in range(max(1, min(tasks, len(ranges))))]
    load = [0] * len(groups)
    for r in sorted(ranges, key=lambda r: (-(r.end - r.start), r.topic, r.partition)):
        i = load.index(min(load))
        groups[i].append(r)
        load[i] += r.end - r.start
    return [sorted(g, key=lambda r: (r.topic, r.partition)) for g in groups]


def land_task(staged: str, row_group_rows: int, lab_runs: str = "", plan=None, prefix: str = ""):
    """mapInArrow function over the Kafka source's rows (Spark fetched the messages and
    hands them over as Arrow): the design before fetch_task, kept for bench/ingest.py's
    same-run comparison of the two."""

    def task(batches):
        import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
        from pyspark import TaskContext  # noqa: PLC0415  (start-up: pyspark)

        def messages():
            for rb in batches:
                values, offsets = rb.column("value"), rb.column("offset")
                for i in range(rb.num_rows):
                    yield values[i].as_py(), offsets[i].as_py(), lambda rb=rb, i=i: {
                        k: rb.column(k)[i].as_py() for k in ("topic", "partition", "offset", "timestamp", "key")}

        out = land_messages(messages(), staged, f"{prefix}part-{TaskContext.get().partitionId():05d}",
                            row_group_rows, lab_runs, plan)
        yield pa.RecordBatch.from_pylist(out, schema=_result_schema())

    return task


def _result_schema():
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

    return pa.schema([
        ("kind", pa.string()), ("path", pa.string()), ("rows", pa.int64()), ("messages", pa.int64()),
        ("offsets", pa.int64()),
        ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")), ("key", pa.binary()), ("value", pa.binary()),
        ("reason", pa.string()),
        ("task_seconds", pa.float64()), ("task_cpu", pa.float64()), ("write_seconds", pa.float64()),
    ])


def write_quarantine(rows: list, path: Path) -> None:
    """Bad messages with the reason, as one Parquet file (columns as the Avro path's)."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
    import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: pyarrow)

    now = dt.datetime.now(dt.timezone.utc)
    table = pa.Table.from_pylist(
        [{"topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
          "key": r.key, "value": r.value, "reason": r.reason, "quarantined_at": now} for r in rows],
        schema=pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                          ("timestamp", pa.timestamp("us", tz="UTC")), ("key", pa.binary()),
                          ("value", pa.binary()), ("reason", pa.string()),
                          ("quarantined_at", pa.timestamp("us", tz="UTC"))]))
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path / "part-00000.parquet", compression="zstd", use_deprecated_int96_timestamps=True)


APP_ID = "ingest-flows"  # the Delta application transaction the flows ingest commits under
PARTITION_BY = ["date", "hour"]
RECENT = 20  # batches kept in state/ingest/<table>-recent.json (ingest_lag.RECENT_BATCHES)


def table_schema():
    """The flows table's Arrow schema as the ingest writes it: the files' columns with
    microsecond UTC times (Delta's timestamp), then the partition columns."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

    from flowlake.pipelines.enrich import apply as enrich  # noqa: PLC0415  (start-up: numpy, pyarrow)

    fields = []
    for f in lab_tag.with_run_id(enrich.lake_schema()):
        if pa.types.is_timestamp(f.type):
            f = f.with_type(pa.timestamp("us", tz="UTC"))
        elif pa.types.is_dictionary(f.type):
            f = f.with_type(f.type.value_type)
        fields.append(f)
    return pa.schema([*fields, pa.field("date", pa.string()), pa.field("hour", pa.int32())])


def partition_of(path: Path) -> dict:
    """{"date": d, "hour": h} of a file in lake/flows/date=d/hour=h/."""
    return {"date": path.parent.parent.name[len("date="):], "hour": int(path.parent.name[len("hour="):])}


def totals_path(cfg, table: str) -> Path:
    return cfg.path("state", "ingest", f"{table}.json")


def add_totals(cfg, table: str, counters: dict) -> None:
    """The batch's counters summed into state/ingest/<table>.json (for `flowlake status`;
    each commit's custom metadata holds the same)."""
    import json  # noqa: PLC0415  (start-up: only after a commit)

    path = totals_path(cfg, table)
    try:
        tot = json.loads(path.read_text())
    except (OSError, ValueError):
        tot = {}
    for k, v in counters.items():
        if isinstance(v, (int, float)):
            tot[k] = tot.get(k, 0) + v
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(tot))
    os.replace(tmp, path)
    # the newest batches, for the ingest's rates in `flowlake status` (ingest_lag.recent_batches)
    recent_path = cfg.path("state", "ingest", f"{table}-recent.json")
    try:
        recent = json.loads(recent_path.read_text())
    except (OSError, ValueError):
        recent = []
    recent = [*recent, {**counters, "at": time.time()}][-RECENT:]
    tmp = recent_path.with_name(recent_path.name + ".tmp")
    tmp.write_text(json.dumps(recent))
    os.replace(tmp, recent_path)


def make_handler(cfg, stream, checkpoint: Path, row_group_rows: int = 262144, fetch: str = "tasks"):
    """foreachBatch function of the flows stream. fetch: "tasks" = the Python tasks read the
    batch's offset range from the broker themselves (the default); "spark" = Spark's Kafka
    source reads the messages and hands them to the tasks (the design before: bench/ingest.py compares).

    The tasks write the batch's files straight into lake/flows/date=/hour=/ as
    b<batch>-part-<task>.parquet (a retried task replaces its own file); the driver then
    commits them to the Delta table in one commit with the transaction (APP_ID, batch id).
    A replayed batch finds its id committed and is skipped; files of a batch that died
    before its commit are listed by no version (invisible; VACUUM removes them)."""
    from flowlake.base import delta  # noqa: PLC0415  (start-up: deltalake)

    from .enrich.sources import Sources  # noqa: PLC0415  (start-up: numpy, pyarrow)

    quarantine_writer = quarantine_writer_for(cfg, stream)
    table = Path(cfg.lake) / stream.table
    schema = table_schema()
    delta.ensure_table(table, schema, PARTITION_BY, lake_tables.table_properties(cfg))
    lab_runs = registry_path(cfg)
    enrichment = Sources(cfg)  # checks the enrichment files and rules now: a bad one stops the start
    kafka_conf = cfg.kafka_client_conf()

    def job(batch_df, batch_id: int, plan) -> list:
        spark = batch_df.sparkSession
        prefix = f"b{batch_id:012d}-"
        if fetch == "tasks":
            ranges = batch_ranges(checkpoint, batch_id)
            if not ranges:
                return []
            groups = group_ranges(ranges, spark.sparkContext.defaultParallelism)
            return (spark.range(0, len(groups), 1, len(groups))
                    .mapInArrow(fetch_task(groups, kafka_conf, str(table), row_group_rows, str(lab_runs), plan,
                                           prefix), RESULT_DDL).collect())
        conf_key = "spark.sql.execution.arrow.maxRecordsPerBatch"
        before = spark.conf.get(conf_key, None)
        spark.conf.set(conf_key, MESSAGES_PER_ARROW_BATCH)
        try:
            return (batch_df.select("key", "value", "topic", "partition", "offset", "timestamp")
                    .mapInArrow(land_task(str(table), row_group_rows, str(lab_runs), plan, prefix), RESULT_DDL)
                    .collect())
        finally:
            if before is None:
                spark.conf.unset(conf_key)
            else:
                spark.conf.set(conf_key, before)

    def handle(batch_df, batch_id: int) -> None:
        last = delta.committed_version(table, APP_ID)
        if last is not None and batch_id <= last:
            log.info("%s batch %d already in the lake (replay after a restart): skipped", stream.table, batch_id)
            return
        started = time.monotonic()
        plan = enrichment.plan()  # changed files are picked up here, between micro-batches
        results = job(batch_df, batch_id, plan)
        collected = time.monotonic()
        rows = sum(r.rows for r in results if r.kind == "file")
        messages = sum(r.messages for r in results if r.kind == "task")
        tasks = sum(1 for r in results if r.kind == "task")
        offsets = sum(r.offsets for r in results if r.kind == "task")
        bad = [r for r in results if r.kind == "bad"]
        q_staged = quarantine_writer.staging(batch_id)
        if bad:
            write_quarantine(bad, q_staged)
            for r in bad[:5]:
                log.error("quarantined %s[%d]@%d: %s", r.topic, r.partition, r.offset, r.reason)
        quarantine_writer.publish(batch_id, q_staged, {"rows": len(bad)})
        task_rows = [r for r in results if r.kind == "task"]
        timing = {"collect_seconds": collected - started,  # the Spark job: Kafka read, hand-off, the tasks
                  "task_seconds": sum(r.task_seconds for r in task_rows),  # tasks' Python wall, summed
                  "task_cpu": sum(r.task_cpu for r in task_rows),
                  "write_seconds": sum(r.write_seconds for r in task_rows)}
        published = time.monotonic()
        files = [Path(r.path) for r in results if r.kind == "file"]
        counters = {"rows": rows, "quarantined": len(bad), "messages": messages, "offsets": offsets,
                    "tasks": tasks, "files": len(files), "seconds": round(published - started, 3),
                    **{k: round(v, 3) for k, v in timing.items()}}
        committed = delta.commit_batch_files(table, [(f, partition_of(f)) for f in files], schema, PARTITION_BY,
                                             APP_ID, batch_id, counters)
        if committed:
            add_totals(cfg, stream.table, counters)
        seconds = time.monotonic() - started
        log.info("%s batch %d: %d rows from %d messages into the lake, %d quarantined, %.1fs (%.0f rows/s; "
                 "Spark job %.1fs, commit %.2fs)%s", stream.table, batch_id, rows, messages, len(bad), seconds,
                 rows / max(seconds, 1e-6), timing["collect_seconds"], time.monotonic() - published,
                 "" if committed else " (already committed by another writer: nothing added)")

    return handle
