"""SNMP interface counters (issue 21) and the capacity reports built from them.

The SNMP poller (collectors/snmp/) reads each exporter's IF-MIB counters every
[snmp] poll_interval_seconds and writes one Parquet file per exporter and poll into
`lake/interface_counters/date=YYYY-MM-DD/` (merged into one file per day once the day is
two days old): per interface the raw counters and their
deltas since the previous poll (counter wraps undone; an agent restart, sysUpTime going
back, gives null deltas and `reset` = true).
"""
from .core import REPORT_COUNT_AT, REPORT_DATE, REPORT_HOUR, Field, Record

# name in the lake, numeric OID of its IF-MIB column, counter width in bits
COUNTERS = (
    ("in_octets", "1.3.6.1.2.1.31.1.1.1.6", 64),        # ifHCInOctets
    ("out_octets", "1.3.6.1.2.1.31.1.1.1.10", 64),      # ifHCOutOctets
    ("in_ucast_pkts", "1.3.6.1.2.1.31.1.1.1.7", 64),    # ifHCInUcastPkts
    ("out_ucast_pkts", "1.3.6.1.2.1.31.1.1.1.11", 64),  # ifHCOutUcastPkts
    ("in_errors", "1.3.6.1.2.1.2.2.1.14", 32),          # ifInErrors
    ("out_errors", "1.3.6.1.2.1.2.2.1.20", 32),         # ifOutErrors
    ("in_discards", "1.3.6.1.2.1.2.2.1.13", 32),        # ifInDiscards
    ("out_discards", "1.3.6.1.2.1.2.2.1.19", 32),       # ifOutDiscards
)

_UNITS = {"octets": "bytes", "pkts": "packets", "errors": "packets", "discards": "packets"}


def _counter_fields():
    out = []
    for name, oid, bits in COUNTERS:
        unit = _UNITS[name.rsplit("_", 1)[1]]
        out.append(Field(name, "long", f"{name.replace('_', ' ')} since the previous poll (OID {oid}, "
                                       f"Counter{bits}, wraps undone); null after an agent restart", unit,
                         nullable=True))
    for name, oid, bits in COUNTERS:
        out.append(Field(f"{name}_counter", "long", f"raw Counter{bits} value of {oid} at this poll "
                                                    "(64-bit values above 2^63 stored modulo 2^64, as signed)"))
    return tuple(out)


INTERFACE_COUNTERS = Record(
    name="interface_counters",
    namespace="flowlake.pipelines.lake",
    doc=("SNMP interface counters: `lake/interface_counters/date=YYYY-MM-DD/`, one row per exporter, "
         "interface and poll (collectors/snmp/), partitioned by the UTC date of `time`. Deltas cover "
         "(previous poll, time]; kept [retention] interface_counters_days."),
    fields=(
        Field("time", "timestamp_ms", "when the poller read the counters (UTC)", "ms since epoch"),
        Field("exporter", "string", "router address (as in the flows' exporter column)"),
        Field("if_index", "long", "SNMP interface index (the flows' input_if / output_if)"),
        Field("if_name", "string", "ifName at the last refresh; sFlow rows: the agent's port name (counter "
                                   "record 0:1005) (empty: unknown)"),
        Field("speed_mbps", "long", "ifHighSpeed (else ifSpeed / 10^6) at the last refresh; 0 = unknown", "Mbit/s"),
        Field("oper_status", "int", "ifOperStatus at the last refresh: 1 up, 2 down, ... 0 = unknown"),
        Field("sys_uptime_cs", "long", "sysUpTime of the agent at this poll", "centiseconds"),
        Field("interval_s", "double", "seconds since the previous poll of this interface (null: first poll or "
                                      "restart)", "s", nullable=True),
        Field("reset", "boolean", "true: the agent restarted since the previous poll (sysUpTime went back): "
                                  "deltas are null"),
        *_counter_fields(),
        Field("date", "string", "UTC date of time, YYYY-MM-DD (partition)"),
    ),
    partition_by=("date",),
)

_IFACE = (
    Field("exporter", "string", "router address"),
    Field("if_index", "long", "SNMP interface index"),
    Field("if_name", "string", "ifName (empty: unknown)"),
    Field("side", "string", "in (ifHCInOctets, flows with input_if = if_index) / out (ifHCOutOctets, output_if)"),
)

INTERFACE_UTILISATION = Record(
    name="interface_utilisation",
    namespace="flowlake.reports",
    doc=("Utilisation per interface and side from the SNMP counters (job interface_capacity): 5-minute and "
         "hourly rates (period 5m / 1h, bucket = its start) and the day (period 1d: mean, peak and nearest-rank "
         "95th percentile of the day's 5-minute rates), against ifHighSpeed. A poll's delta counts in the "
         "bucket of its poll time."),
    fields=(
        Field("period", "string", "5m / 1h / 1d"),
        Field("bucket", "timestamp_ms", "start of the 5-minute bucket, hour or day (UTC)", "ms since epoch"),
        *_IFACE,
        Field("bytes", "double", "octets counted in the bucket", "bytes"),
        Field("seconds", "double", "seconds of counter intervals covering the bucket", "s"),
        Field("bps", "double", "mean rate: bytes * 8 / seconds", "bit/s"),
        Field("peak_bps", "double", "largest 5-minute rate in the bucket", "bit/s"),
        Field("p95_bps", "double", "95th percentile of the bucket's 5-minute rates (nearest rank)", "bit/s"),
        Field("speed_bps", "double", "ifHighSpeed * 10^6 (0: unknown)", "bit/s"),
        Field("utilisation", "double", "bps / speed_bps (null: speed unknown)", "fraction 0..1", nullable=True),
        Field("peak_utilisation", "double", "peak_bps / speed_bps", "fraction 0..1", nullable=True),
        Field("p95_utilisation", "double", "p95_bps / speed_bps", "fraction 0..1", nullable=True),
        REPORT_DATE,
    ),
    partition_by=("date",),
)

FLOW_COVERAGE = Record(
    name="flow_coverage",
    namespace="flowlake.reports",
    doc=("Flow coverage per interface, side and hour (job interface_capacity): sampling-corrected flow bytes "
         "(flows with input_if = if_index for in, output_if for out, hour of time_start) divided by the "
         "interface's counter bytes; hour null = the whole day. Far from 1: a wrong sampling rate, lost export datagrams or an "
         "interface not exporting (`flowlake status` warns). Flow bytes are layer 3, counters layer 2, so "
         "full coverage reads slightly below 1."),
    fields=(
        REPORT_HOUR,
        *_IFACE,
        Field("flow_bytes", "double", "bytes of the hour's flows on the interface (sampling-corrected)", "bytes"),
        Field("flows", "long", "flow records counted", "flows"),
        Field("counter_bytes", "double", "octets the interface's counters saw in the hour", "bytes"),
        Field("counter_seconds", "double", "seconds of the hour (day) the counter polls cover", "s"),
        Field("coverage", "double", "flow_bytes / counter_bytes; null when the counters saw nothing or cover "
                                    "less than 95 % of the hour (day): a partial hour would read too high", "ratio",
              nullable=True),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)
