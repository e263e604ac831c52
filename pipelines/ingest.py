"""`flowlake ingest`: Spark Structured Streaming from Kafka into the Parquet lake.

flows.v1  -> lake/flows/date=YYYY-MM-DD/hour=HH/  (partitioned by time_start, UTC)
active.v1 -> lake/active/date=YYYY-MM-DD/         (partitioned by start, UTC)
health.v1 -> lake/exporter_health/date=YYYY-MM-DD/ (partitioned by interval_start, UTC)
Undecodable messages -> lake/quarantine/ingest/<table>/ with the reason; never stop the stream.

Exactly once: Spark's checkpoint fixes each batch's Kafka offset range before the batch
runs; lake/flows is a Delta table whose commit of a batch carries (ingest-flows, batch id),
so a replayed batch is a no-op (flow_ingest); lake/exporter_health likewise with
(ingest-exporter_health, batch id) (lake_writer.DeltaBatchWriter, DELTA_STREAMS); the other
streams' BatchWriter makes writing a batch idempotent; consumers read with
isolation.level=read_committed so aborted shipper transactions are never seen.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import click

from flowlake.base import config as _config
from flowlake.schemas import registry
from .lake_writer import writer_for  # noqa: F401  (re-exported: ingest.writer_for)

log = logging.getLogger("flowlake.ingest")


@dataclass(frozen=True)
class Stream:
    table: str           # lake folder below lake/
    topic: str
    record_name: str     # Avro record in the schemas registry
    ts_col: str          # partitioning timestamp
    hourly: bool


def streams(cfg) -> list[Stream]:
    out = [Stream("flows", cfg.kafka.flows_topic, "Flow", "time_start", True)]
    if "ActiveResult" in registry():
        out.append(Stream("active", cfg.kafka.active_topic, "ActiveResult", "start", False))
    if "ExporterHealth" in registry():
        out.append(Stream("exporter_health", cfg.kafka.health_topic, "ExporterHealth", "interval_start", False))
    if "ExperimentResult" in registry():
        out.append(Stream("experiments", cfg.kafka.experiments_topic, "ExperimentResult", "start", False))
    return out




def checkpoint_dir(cfg, stream: Stream) -> Path:
    return cfg.path("state", "checkpoints", stream.table)


def make_batch_handler(cfg, stream: Stream, **options):
    if stream.table == "flows":  # FlowBatch and legacy Avro messages, decoded in Arrow
        from .flow_ingest import make_handler  # noqa: PLC0415  (start-up: flowlake status)

        return make_handler(cfg, stream, checkpoint_dir(cfg, stream), **options)
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    from flowlake.schemas import avro, registry  # noqa: PLC0415  (start-up: flowlake status)
    from .decode import bad_rows, decode, good_rows, with_time_partitions  # noqa: PLC0415  (start-up: pyspark)

    record = registry()[stream.record_name]
    header = avro.header(record)
    lake_writer, quarantine_writer = writer_for(cfg, stream)
    parts = ["date", "hour"] if stream.hourly else ["date"]

    def handle(batch_df, batch_id: int) -> None:
        from pyspark.sql import Observation  # noqa: PLC0415  (start-up: pyspark)

        if lake_writer.already_done(batch_id):
            log.info("%s batch %d already in the lake (replay after a restart): skipped", stream.table, batch_id)
            return
        started = time.monotonic()
        # One pass: decode, write the good rows, and count everything on the way
        # (observe) instead of caching the batch; bad rows cost a second pass only
        # in the rare batch that has any.
        obs = Observation(f"{stream.table}-{batch_id}")
        decoded = decode(batch_df, record, header).observe(
            obs, F.count(F.lit(1)).alias("messages"), F.count("_reason").alias("quarantined"))
        good = with_time_partitions(good_rows(decoded, record), stream.ts_col, stream.hourly)
        staged = lake_writer.staging(batch_id)
        good.write.partitionBy(*parts).option("compression", "zstd").parquet(str(staged))
        counts = obs.get
        q_staged = quarantine_writer.staging(batch_id)
        if counts["quarantined"]:
            bad = bad_rows(decode(batch_df, record, header)).cache()
            bad.coalesce(1).write.option("compression", "zstd").parquet(str(q_staged))
            for row in bad.select("topic", "partition", "offset", "reason").limit(5).collect():
                log.error("quarantined %s[%d]@%d: %s", row.topic, row.partition, row.offset, row.reason)
            bad.unpersist()
        quarantine_writer.publish(batch_id, q_staged, {"rows": counts["quarantined"]})
        rows = counts["messages"] - counts["quarantined"]
        lake_writer.publish(batch_id, staged, {"rows": rows, "quarantined": counts["quarantined"]})
        log.info("%s batch %d: %d rows into the lake, %d quarantined, %.1fs",
                 stream.table, batch_id, rows, counts["quarantined"], time.monotonic() - started)

    return handle


def start_queries(spark, cfg, once: bool = False, **options):
    """options: make_batch_handler's (the flows handler's fetch, for bench/ingest.py)."""
    queries = []
    kafka_opts = {
        "kafka.isolation.level": "read_committed",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": str(cfg.spark.max_offsets_per_trigger),
        # FlowBatch messages are up to a few MB: fetch many per round trip (defaults: 1 MB)
        "kafka.max.partition.fetch.bytes": str(16 << 20),
        "kafka.fetch.max.bytes": str(64 << 20),
    }
    for key, value in cfg.kafka_java_conf().items():
        kafka_opts[f"kafka.{key}"] = value
    for stream in streams(cfg):
        reader = spark.readStream.format("kafka").options(**kafka_opts).option("subscribe", stream.topic)
        writer = (
            reader.load().writeStream.queryName(f"ingest-{stream.table}")
            .option("checkpointLocation", str(checkpoint_dir(cfg, stream)))
            .foreachBatch(make_batch_handler(cfg, stream, **options))
        )
        writer = writer.trigger(availableNow=True) if once else writer.trigger(
            processingTime=f"{cfg.spark.trigger_seconds} seconds")
        queries.append(writer.start())
        log.info("ingesting %s -> %s", stream.topic, Path(cfg.lake) / stream.table)
    return queries


def session(cfg, master: str | None = None):
    """The ingest's Spark session (its JVM options: [spark] ingest_java_options)."""
    from flowlake.base import spark as spark_factory  # noqa: PLC0415  (start-up: flowlake status)

    return spark_factory.session("flowlake-ingest", master=master, cfg=cfg,
                                 java_options=cfg.spark.ingest_java_options)


def run(cfg=None, once: bool = False, master: str | None = None, **options) -> None:
    from .enrich.sources import check_config  # noqa: PLC0415  (start-up: numpy, pyarrow)

    cfg = cfg or _config.get()
    check_config(cfg)  # a bad rule or networks line stops us before Spark starts
    spark = session(cfg, master)
    queries = start_queries(spark, cfg, once=once, **options)
    if once:
        for q in queries:
            q.awaitTermination()
    else:
        spark.streams.awaitAnyTermination()
    for q in queries:
        if q.exception() is not None:
            raise RuntimeError(f"query {q.name} failed: {q.exception()}")


def counts(cfg=None) -> dict:
    """Rows in the lake and in quarantine, from the batch markers (no lake scan)."""
    cfg = cfg or _config.get()
    out = {}
    for stream in streams(cfg):
        if stream.table == "flows":  # a Delta table: its commits' counters, summed after each commit
            import json  # noqa: PLC0415  (start-up: flowlake status)

            try:
                tot = json.loads(cfg.path("state", "ingest", "flows.json").read_text())
            except (OSError, ValueError):
                tot = {}
        else:
            tot = writer_for(cfg, stream)[0].totals()
        out[stream.table] = {"rows": int(tot.get("rows", 0)), "quarantined": int(tot.get("quarantined", 0))}
    return out


@click.command()
@click.option("--once", is_flag=True, help="Drain what Kafka holds now, write it, and exit.")
@click.option("--master", default=None, help="Spark master (default: [spark] master): local[2]; cluster (this home's "
                   "`flowlake cluster up`); spark://host:7077.")
def ingest(once: bool, master: str | None) -> None:
    """Stream flows.v1 (and active.v1) from Kafka into the Parquet lake.

    Runs until stopped (`flowlake up` starts it in the background); each trigger
    writes one micro-batch per topic, exactly once, into
    $FLOWLAKE_HOME/lake/flows/date=YYYY-MM-DD/hour=HH/. Messages that do not decode
    go to lake/quarantine/ingest/ with the reason.

    \b
    Examples:
      flowlake ingest --once                # drain Kafka now and exit (backfills, tests)
      flowlake ingest --master spark://spark-master:7077
      FLOWLAKE_SPARK_MASTER=cluster flowlake ingest   # on `flowlake cluster up`'s cluster

    On a standalone cluster (spark://...) the command runs itself through spark-submit,
    with at most [cluster] ingest_cores cores; the lake and state/checkpoints must then
    be on storage every worker sees at the same path (one machine, or a shared mount).
    """
    from flowlake.base import spark as spark_factory  # noqa: PLC0415  (start-up: flowlake status)

    cfg = _config.get()
    spark_factory.submit_if_cluster("flowlake-ingest", master, cfg, batch=once, cores_max=cfg.cluster.ingest_cores,
                                    java_options=cfg.spark.ingest_java_options)
    run(cfg, once=once, master=master)

