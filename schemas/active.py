"""Active test results (ping, iperf3, pScheduler, NetLogger, CSV sweeps): one record shape.

Every format is normalised to: what kind of test, from where to where, when, the
knobs it ran with (`parameters`, text) and what it measured (`metrics`, numbers).
Metric names carry their unit as a suffix (`rtt_avg_ms`, `throughput_bps`, `loss`
as a fraction 0..1) so maps from different tools line up.
"""
from .core import Field, Record

_FIELDS = (
    Field("test_type", "string", "rtt | throughput | latency | trace | event | sweep"),
    Field("source", "string", "host that ran the test (address or name; '' if unknown)"),
    Field("destination", "string", "target host/address of the test"),
    Field("start", "timestamp_ms", "test start (UTC)", "ms since epoch"),
    Field("end", "timestamp_ms", "test end (UTC)", "ms since epoch"),
    Field("parameters", "map_string_string", "test settings: protocol, streams, window, size, condition, ..."),
    Field("metrics", "map_string_double", "measured values; the key suffix names the unit (_ms, _bps, _bytes; loss is a fraction)"),
    Field("tool", "string", "tool that produced it: iperf3, ping, fping, pscheduler/<tool>, netlogger, csv, probe"),
    Field("source_file", "string", "file the result was parsed from ('' for live probes)"),
)

ACTIVE_RESULT = Record(
    name="ActiveResult",
    namespace="flowlake.v1",
    doc="One active test result as published to Kafka active.v1 (Avro single-object encoding).",
    fields=_FIELDS,
)

ACTIVE = Record(
    name="active",
    namespace="flowlake.pipelines.lake",
    doc="Active test results: `lake/active/date=YYYY-MM-DD/*.parquet`, partitioned by the UTC date of `start`.",
    fields=_FIELDS + (Field("date", "string", "UTC date of start, YYYY-MM-DD (partition)"),),
    partition_by=("date",),
)
