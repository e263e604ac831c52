"""Lab experiment results (issue 25): one row per run and metric.

`flowlake lab run SPEC.toml` publishes ExperimentResult records to Kafka
([kafka] experiments_topic); the ingest lands them in `lake/experiments/date=.../`.
The grid's parameters are columns (null where a study does not sweep them), so a
chart can put any of them on its x axis with one line per protocol or condition.
"""
from .core import Field, Record

PROTOCOLS = ("tcp", "udp", "mptcp", "sctp")
# metric -> unit (the unit travels in each row too, so a reader never guesses)
METRICS = {
    "achieved_rate": "frames/s",
    "latency_p50": "ms",
    "latency_p99": "ms",
    "max_inter_frame_delay": "ms",
    "dropped_frames": "frames",
    "missed_deadlines": "frames",
    "throughput": "bit/s",
    "rtt": "ms",
    "loss": "fraction",
    "mathis_bound": "bit/s",
    "frames_sent": "frames",
    "bytes_sent": "bytes",
    "latency": "ms",
    "predicted_latency": "ms",
}

_FIELDS = (
    Field("run_id", "string", "one run of the grid: study, grid point and repetition (stable across reruns)"),
    Field("study", "string", "the spec's study name"),
    Field("kind", "string", "runner: paced | bulk | probe | split"),
    Field("protocol", "string", "tcp | udp | mptcp | sctp"),
    Field("congestion_control", "string", "TCP congestion control (reno, cubic, bbr; '' for UDP)"),
    Field("condition", "string", "named condition of the spec (loss, flapping, ...)"),
    Field("path", "string", "path name of the topology ('a+b' for runs over two paths)"),
    Field("frame_size", "long", "paced frame size", "bytes", nullable=True),
    Field("rate", "double", "paced frames per second, or the bulk UDP target rate in bit/s", nullable=True),
    Field("streams", "int", "parallel streams (iperf3 -P)", nullable=True),
    Field("window", "long", "socket buffer / window (iperf3 -w)", "bytes", nullable=True),
    Field("message_size", "long", "message size of probe and split runs", "bytes", nullable=True),
    Field("repetition", "int", "repetition of the grid point, from 0"),
    Field("metric", "string", "achieved_rate, latency_p50, latency_p99, max_inter_frame_delay, dropped_frames, "
          "missed_deadlines, throughput, rtt, loss, mathis_bound, ..."),
    Field("value", "double", "the measured value"),
    Field("unit", "string", "unit of value (ms, bit/s, frames, fraction, ...)"),
    Field("start", "timestamp_ms", "run start (UTC)", "ms since epoch"),
    Field("end", "timestamp_ms", "run end (UTC)", "ms since epoch"),
)

EXPERIMENT_RESULT = Record(
    name="ExperimentResult",
    namespace="flowlake.v1",
    doc="One metric of one lab run as published to Kafka experiments.v1 (Avro single-object encoding).",
    fields=_FIELDS,
)

EXPERIMENTS = Record(
    name="experiments",
    namespace="flowlake.pipelines.lake",
    doc="Lab results: `lake/experiments/date=YYYY-MM-DD/*.parquet`, one row per run and metric.",
    fields=_FIELDS + (Field("date", "string", "UTC date of start, YYYY-MM-DD (partition)"),),
    partition_by=("date",),
)
