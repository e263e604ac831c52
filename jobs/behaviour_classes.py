"""behaviour_classes: every flow record of the day in one EVL tele-immersion behaviour
class, decided from how it behaves (duration, mean packet size, packets/s, rate, the
steadiness of its records' packet rate, its conversation's volume), never from ports;
flows, packets, bytes and hosts per class.

The classes follow the EVL tele-immersion data classes (Leigh et al., CAVERN, EVL/UIC:
tracking/avatar, audio, video, simulation state, database/event updates, bulk data):
- streams last at least [behaviour] min_stream_seconds with min_stream_packets; by mean
  packet size: avatar (tracker records, < 160 B), audio (20 ms voice frames, < 260 B),
  realtime_state (shared simulation state, < 900 B), video (RTP-sized, < 1350 B, below
  video_max_bps); full-size packets at streaming_min_bps or more: streaming_bulk (a paced
  dataset stream). Avatar, audio, state and video streams must be periodic: the records
  of one conversation (5-tuple) keep their packets/s within steady_max_cv (one record:
  nothing to compare, taken as steady), except video: a single record of RTP-sized
  packets looks like a transfer of slightly smaller packets, so video needs two records
  (a stream outlasting the active timeout) that keep their rate.
- state_update: long-lived, sparse (< sparse_max_pps) small packets: an event/database
  channel kept open.
- bulk by the conversation's bytes over the day (a transfer cut into records by the
  router's active timeout is one conversation): large_bulk from large_bulk_bytes,
  small_bulk from small_bulk_bytes.
- other: everything else (web, DNS, scans, ...).
"""
from __future__ import annotations

from flowlake.schemas.pinger import BEHAVIOUR_CLASSES

from . import common

NAME = "behaviour_classes"
TABLES = (BEHAVIOUR_CLASSES,)
CLASSES = ("avatar", "audio", "video", "realtime_state", "state_update", "small_bulk", "large_bulk",
           "streaming_bulk", "other")
CONVERSATION = ("src_addr", "dst_addr", "src_port", "dst_port", "proto")
# what classify and per_class read, and behaviour_needs after them (class, ends, bytes): the
# conversation window shuffles and the cache holds these, not the lake's ~60 columns
USED = (*CONVERSATION, "time_start", "time_end", "packets", "bytes")


def classify(flows, b):
    """flows (lake rows) -> the same rows + `class`. b: the [behaviour] config section."""
    from pyspark.sql import Window  # noqa: PLC0415  (start-up: pyspark)
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    secs = (F.unix_millis("time_end") - F.unix_millis("time_start")) / 1000.0
    df = (flows.withColumn("_d", secs)
          .withColumn("_size", F.col("bytes") / F.greatest(F.col("packets"), F.lit(1)))
          .withColumn("_pps", F.when(F.col("_d") > 0, F.col("packets") / F.col("_d")))
          .withColumn("_bps", F.when(F.col("_d") > 0, F.col("bytes") * 8.0 / F.col("_d"))))
    conv = Window.partitionBy(*CONVERSATION)
    df = (df.withColumn("_conv_bytes", F.sum("bytes").over(conv))
          .withColumn("_records", F.count(F.col("_pps")).over(conv))
          .withColumn("_cv", F.stddev_pop("_pps").over(conv) / F.avg("_pps").over(conv)))
    size, d = F.col("_size"), F.col("_d")
    steady = (F.col("_records") < 2) | (F.col("_cv") <= float(b.steady_max_cv))
    stream = (d >= float(b.min_stream_seconds)) & (F.col("packets") >= int(b.min_stream_packets))
    periodic = stream & steady
    cls = (F.when((d >= float(b.min_stream_seconds)) & (F.col("_pps") < float(b.sparse_max_pps))
                  & (size < float(b.state_max_packet_bytes)), "state_update")
           .when(periodic & (size < float(b.avatar_max_packet_bytes)), "avatar")
           .when(periodic & (size < float(b.audio_max_packet_bytes)), "audio")
           .when(periodic & (size < float(b.state_max_packet_bytes)), "realtime_state")
           .when(periodic & (F.col("_records") >= 2) & (size < float(b.video_max_packet_bytes))
                 & (F.col("_bps") < float(b.video_max_bps)), "video")
           .when(stream & (size >= float(b.video_max_packet_bytes)) & (F.col("_bps") >= float(b.streaming_min_bps)),
                 "streaming_bulk")
           .when(F.col("_conv_bytes") >= float(b.large_bulk_bytes), "large_bulk")
           .when(F.col("_conv_bytes") >= float(b.small_bulk_bytes), "small_bulk")
           .otherwise("other"))
    return df.withColumn("class", cls).drop("_d", "_size", "_pps", "_bps", "_conv_bytes", "_records", "_cv")


def per_class(classified):
    """classified flows -> BEHAVIOUR_CLASSES rows (without date), one per class, empty ones too."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    spark = classified.sparkSession
    hosts = (classified.select("class", F.col("src_addr").alias("h"))
             .union(classified.select("class", F.col("dst_addr").alias("h")))
             .groupBy("class").agg(F.countDistinct("h").alias("hosts")))
    sums = classified.groupBy("class").agg(F.count("*").alias("flows"), F.sum("packets").alias("packets"),
                                           F.sum("bytes").alias("bytes"))
    every = spark.createDataFrame([(c,) for c in CLASSES], "class string")
    out = every.join(sums, "class", "left").join(hosts, "class", "left").fillna(0, ["flows", "packets", "bytes", "hosts"])
    return out.select("class", *[F.col(c).cast("long").alias(c) for c in ("flows", "packets", "bytes", "hosts")])


def run(ctx) -> None:
    classified = classify(common.site_flows(ctx).select(*USED), ctx.cfg.behaviour).cache()
    ctx.shared["behaviour_flows"] = classified  # for behaviour_needs; the runner unpersists it after that job
    ctx.write(per_class(classified), NAME)
