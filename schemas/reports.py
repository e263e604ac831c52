"""Daily network-operations report tables (issue 4), written by the jobs in jobs/.

Shared conventions, true for every table here:
- `hour` is the UTC hour of the flows' start (0-23), or null for the whole day.
- `direction` comes from `[site] local_prefixes`: `inbound` (remote -> local),
  `outbound` (local -> remote), `internal` (local -> local), `transit` (remote ->
  remote); `all` rows (every flow) are always present.
- bytes and packets are already multiplied by the sampling rate in the lake; a flow
  record counts as one flow (as nfdump counts them).
- `date` (YYYY-MM-DD, the partition `lake/reports/<table>/date=.../`) is last.
"""
from .core import Field, Record, REPORT_COUNT_AT, REPORT_DATE, REPORT_HOUR

DIRECTIONS = ("all", "inbound", "outbound", "internal", "transit")

_HOUR = REPORT_HOUR
_DIRECTION = Field("direction", "string", "all / inbound / outbound / internal / transit (from site.local_prefixes)")
_VOLUMES = (
    Field("flows", "long", "flow records", "flows"),
    Field("packets", "long", "packets (sampling-corrected)", "packets"),
    Field("bytes", "long", "bytes at layer 3 (sampling-corrected)", "bytes"),
)
_SHARES = (
    Field("flows_share", "double", "flows / all flows of the same hour and direction", "fraction 0..1"),
    Field("packets_share", "double", "packets / all packets of the same hour and direction", "fraction 0..1"),
    Field("bytes_share", "double", "bytes / all bytes of the same hour and direction", "fraction 0..1"),
)

TOP_TALKERS = Record(
    name="top_talkers",
    namespace="flowlake.reports",
    doc=("Top N hosts or host pairs per hour (and whole day), direction, key (`by`) and ranking "
         "`metric`; the same lists as `nfdump -s srcip/bytes`, `-s dstip/packets`, ... Ties are "
         "ordered by the metric descending, then the other two metrics descending, then address text "
         "ascending (nfdump's own tie order depends on its hash table and is not reproducible)."),
    fields=(
        _HOUR,
        _DIRECTION,
        Field("by", "string", "key: src (source address), dst (destination address) or pair (both)"),
        Field("metric", "string", "ranking metric: bytes / packets / flows"),
        Field("rank", "int", "1 = largest metric value; 1..top_n (reports.top_n)"),
        Field("src_addr", "string", "source address (null when by = dst)", nullable=True, address="one"),
        Field("dst_addr", "string", "destination address (null when by = src)", nullable=True, address="one"),
        *_VOLUMES,
        Field("share", "double", "this key's value of `metric` / total of `metric` in the same hour and direction", "fraction 0..1"),
        Field("rank_change", "int", "previous day's rank minus today's rank for the same hour, direction, by, metric and key "
              "(positive = climbed); null if not in the previous day's list or no previous report", nullable=True),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)

PROTOCOL_MIX = Record(
    name="protocol_mix",
    namespace="flowlake.reports",
    doc="Traffic per IP protocol for each hour (and the whole day) and direction, with shares.",
    fields=(
        _HOUR,
        _DIRECTION,
        Field("proto", "int", "IP protocol number"),
        Field("proto_name", "string", "protocol name (TCP, UDP, ICMP, ...; the number as text if unnamed)"),
        *_VOLUMES,
        *_SHARES,
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)

APP_MIX = Record(
    name="app_mix",
    namespace="flowlake.reports",
    doc=("Traffic per application for each hour (and the whole day) and direction. The label comes "
         "from the port map (pipelines/port_map.csv plus reports.port_map): the destination port is "
         "looked up first, then the source port; portless protocols are labelled by protocol name "
         "(icmp, gre, esp, ...); unmatched TCP/UDP/SCTP traffic is bucketed as "
         "`other-<proto>-wellknown` (lower port < 1024), `-registered` (< 49152) or `-dynamic`."),
    fields=(
        _HOUR,
        _DIRECTION,
        Field("app", "string", "application label (service name from the port map, or an other-* bucket)"),
        *_VOLUMES,
        *_SHARES,
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)

TRAFFIC_TS = Record(
    name="traffic_ts",
    namespace="flowlake.reports",
    doc=("Five-minute traffic rates and their daily summary. `kind` = 'ts': one row per 5-minute "
         "bucket (288 per UTC day) and series, `bucket` = bucket start, bps/pps = rate in that bucket. "
         "`kind` = 'daily': one row per series, bucket and hour null, bps/pps = mean over the 288 "
         "buckets of the day, peak_* = largest bucket, p95_* = 95th percentile by nearest rank over "
         "all 288 buckets (buckets without traffic count as 0, as in 95th-percentile billing). "
         "`series`: 'total' (per direction), 'interface' (per exporter, input_if and direction), "
         "'proto' (per protocol and direction). A flow's bytes and packets are spread evenly over its "
         "duration [time_start, time_end] (more faithful for bits/s than attributing everything "
         "to the start bucket); flows of the previous day that end after midnight contribute their "
         "share to this day, and the part of a flow after midnight belongs to the next day's report."),
    fields=(
        Field("kind", "string", "ts (one 5-minute bucket) / daily (summary of the day)"),
        Field("series", "string", "total / interface / proto"),
        _HOUR,
        _DIRECTION,
        Field("exporter", "string", "router address (series = interface, else null)", nullable=True),
        Field("input_if", "long", "SNMP input interface index (series = interface, else null)", nullable=True),
        Field("proto", "int", "IP protocol (series = proto, else null)", nullable=True),
        Field("bucket", "timestamp_ms", "bucket start, UTC (kind = ts; null for daily)", "ms since epoch", nullable=True),
        Field("bytes", "double", "bytes in the bucket (ts) or the day (daily); fractional because flows are spread over time", "bytes"),
        Field("packets", "double", "packets in the bucket (ts) or the day (daily)", "packets"),
        Field("bps", "double", "bits per second: bucket rate (ts) or the day's mean (daily)", "bit/s"),
        Field("pps", "double", "packets per second: bucket rate (ts) or the day's mean (daily)", "packet/s"),
        Field("peak_bps", "double", "largest 5-minute rate of the day (daily only)", "bit/s", nullable=True),
        Field("p95_bps", "double", "95th percentile (nearest rank) of the 288 five-minute rates (daily only)", "bit/s", nullable=True),
        Field("peak_pps", "double", "largest 5-minute packet rate of the day (daily only)", "packet/s", nullable=True),
        Field("p95_pps", "double", "95th percentile (nearest rank) of the 288 five-minute packet rates (daily only)", "packet/s", nullable=True),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)

_P = (("p50", "50th"), ("p75", "75th"), ("p90", "90th"), ("p99", "99th"), ("p999", "99.9th"))

FLOW_SIZE_DIST = Record(
    name="flow_size_dist",
    namespace="flowlake.reports",
    doc=("Flow size distribution per hour (0-23) and for the whole day (hour null), per direction and `flow_class` "
         "(tcp, udp, icmp (incl. ICMPv6), other, all). TCP in/out = flow_class 'tcp' with direction "
         "'inbound'/'outbound'. Percentiles are exact, by nearest rank: the smallest observed value v "
         "with at least ceil(p*n) flows <= v (numpy `percentile(..., method='inverted_cdf')`). "
         "CCDF points: x = 10^(k/4) (4 per decade) for every k whose bin [10^(k/4), 10^((k+1)/4)) "
         "holds flows, y = fraction of flows with value >= x."),
    fields=(
        _HOUR,
        _DIRECTION,
        Field("flow_class", "string", "tcp / udp / icmp / other / all"),
        *_VOLUMES,
        Field("bytes_mean", "double", "mean bytes per flow", "bytes"),
        *(Field(f"bytes_{k}", "long", f"{t} percentile of bytes per flow (nearest rank, exact)", "bytes") for k, t in _P),
        Field("packets_mean", "double", "mean packets per flow", "packets"),
        *(Field(f"packets_{k}", "long", f"{t} percentile of packets per flow (nearest rank, exact)", "packets") for k, t in _P),
        Field("top1pct_bytes_share", "double", "share of bytes carried by the largest 1% (ceil(n/100)) flows by bytes", "fraction 0..1"),
        Field("ccdf_bytes_x", "array_double", "CCDF abscissae for bytes per flow (log-binned)", "bytes"),
        Field("ccdf_bytes_y", "array_double", "P(bytes per flow >= x) at each ccdf_bytes_x", "fraction 0..1"),
        Field("ccdf_packets_x", "array_double", "CCDF abscissae for packets per flow (log-binned)", "packets"),
        Field("ccdf_packets_y", "array_double", "P(packets per flow >= x) at each ccdf_packets_x", "fraction 0..1"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)
