"""Small report tables behind the Daily-operations dashboard (issue 7): the day's totals
and its largest flows, so no dashboard has to scan the flow lake (10M+ flows a day).

Conventions as in reports.py: `hour` null = whole day; `direction` from
`[site] local_prefixes` with `all` rows present; `date` (the partition) last.
"""
from .core import Field, Record, REPORT_COUNT_AT, REPORT_DATE, REPORT_HOUR

_DIRECTION = Field("direction", "string", "all / inbound / outbound / internal / transit (from site.local_prefixes)")

TRAFFIC_TOTALS = Record(
    name="traffic_totals",
    namespace="flowlake.reports",
    doc=("Totals per hour (and whole day), direction and exporter: flow records, packets, bytes and "
         "distinct source and destination addresses. `direction` = 'all' and `exporter` = 'all' rows "
         "hold every flow of the hour, so a distinct count is exact at every level; summing the "
         "per-exporter rows gives flows/packets/bytes exactly, but a distinct address seen by two "
         "exporters is counted twice."),
    fields=(
        REPORT_HOUR,
        _DIRECTION,
        Field("exporter", "string", "router address, or 'all' for every exporter"),
        Field("flows", "long", "flow records", "flows"),
        Field("packets", "long", "packets (sampling-corrected)", "packets"),
        Field("bytes", "long", "bytes at layer 3 (sampling-corrected)", "bytes"),
        Field("src_addrs", "long", "distinct source addresses", "addresses"),
        Field("dst_addrs", "long", "distinct destination addresses", "addresses"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)

LARGEST_FLOWS = Record(
    name="largest_flows",
    namespace="flowlake.reports",
    doc=("The day's largest flow records by bytes: the top `reports.top_n` per direction (including "
         "'all') and exporter, so the top N of any direction and set of exporters is exact. A flow "
         "appears twice: under its own direction and under 'all' (`flow_direction` is always its own). "
         "Ties: bytes, then packets descending, then time_start, addresses and ports ascending."),
    fields=(
        _DIRECTION,
        Field("exporter", "string", "router that exported the flow"),
        Field("rank", "int", "1 = largest within direction and exporter"),
        Field("time_start", "timestamp_ms", "first packet of the flow (UTC)", "ms since epoch"),
        Field("time_end", "timestamp_ms", "last packet of the flow (UTC)", "ms since epoch"),
        Field("src_addr", "string", "source address", address="one"),
        Field("src_port", "int", "source port"),
        Field("dst_addr", "string", "destination address", address="one"),
        Field("dst_port", "int", "destination port (ICMP: type*256+code)"),
        Field("proto", "int", "IP protocol number"),
        Field("proto_name", "string", "protocol name (TCP, UDP, ICMP, ...; the number as text if unnamed)"),
        Field("flow_direction", "string", "the flow's own direction: inbound / outbound / internal / transit"),
        Field("input_if", "long", "SNMP input interface index"),
        Field("output_if", "long", "SNMP output interface index"),
        Field("packets", "long", "packets (sampling-corrected)", "packets"),
        Field("bytes", "long", "bytes at layer 3 (sampling-corrected)", "bytes"),
        Field("duration_s", "double", "time_end - time_start", "s"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)
