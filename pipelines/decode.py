"""Pure transforms of the ingest: Kafka rows in, decoded or quarantined rows out.

Every message is Avro single-object encoded (C3 01, 8-byte schema fingerprint, body).
A message whose header is missing or names another schema is quarantined with that
reason rather than decoded as garbage; a body Avro cannot read is quarantined too.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, functions as F

HEADER_LEN = 10


def decode(df: DataFrame, record, header: bytes) -> DataFrame:
    """Add `_reason` (null when good) and `_rec` (the decoded struct) to Kafka rows."""
    from pyspark.sql.avro.functions import from_avro  # noqa: PLC0415  (start-up: pyspark)

    value = F.col("value")
    head = F.substring(value, 1, HEADER_LEN)
    body = F.expr(f"substring(value, {HEADER_LEN + 1}, length(value) - {HEADER_LEN})")
    magic_ok = F.substring(value, 1, 2) == F.lit(header[:2])
    fp_ok = head == F.lit(header)
    decoded = from_avro(body, record.avro_json(), {"mode": "PERMISSIVE"})
    # The barrier column is non-deterministic on purpose: it stops the optimiser from
    # pushing the `_reason` filter through this projection, which would substitute
    # from_avro into every null check below (20 decodes a row instead of one).
    out = df.select("*", F.when(fp_ok, decoded).alias("_rec"),
                    F.monotonically_increasing_id().alias("_barrier"))
    # Spark 4's PERMISSIVE mode yields a struct of nulls (not a null) for a corrupt
    # body, so a null in any required field marks the message as undecodable.
    required = [F.col(f"_rec.{f.name}").isNull() for f in record.fields if not f.nullable]
    broken = F.col("_rec").isNull()
    for cond in required:
        broken = broken | cond
    reason = (
        F.when(value.isNull() | (F.length(value) < HEADER_LEN + 1),
               F.lit("message shorter than the Avro single-object header"))
        .when(~magic_ok, F.lit("not Avro single-object encoded (bad magic bytes)"))
        .when(~fp_ok, F.concat(F.lit("schema fingerprint "), F.hex(F.substring(value, 3, 8)),
                               F.lit(f" is not {record.namespace}.{record.name} ({header[2:].hex().upper()})")))
        .when(broken, F.lit(f"Avro body does not decode as {record.name}"))
    )
    return out.withColumn("_reason", reason)


def good_rows(decoded: DataFrame, record) -> DataFrame:
    # `_barrier >= 0` is always true; referencing it keeps the barrier (see decode).
    return decoded.filter(F.col("_reason").isNull() & (F.col("_barrier") >= 0)).select(
        *[F.col(f"_rec.{name}").alias(name) for name in record.names]
    )


def with_time_partitions(df: DataFrame, ts_col: str, hourly: bool = True) -> DataFrame:
    out = df.withColumn("date", F.date_format(F.col(ts_col), "yyyy-MM-dd"))
    if hourly:
        out = out.withColumn("hour", F.hour(F.col(ts_col)))
    return out


def bad_rows(decoded: DataFrame) -> DataFrame:
    return decoded.filter(F.col("_reason").isNotNull() & (F.col("_barrier") >= 0)).select(
        "topic", "partition", "offset", "timestamp", "key", "value",
        F.col("_reason").alias("reason"), F.current_timestamp().alias("quarantined_at"),
    )
