"""Daily security tables (issue 9): the views that start an investigation.

Written by jobs/scanners.py, jobs/fan_in.py and jobs/new_talkers.py under
`lake/reports/<table>/date=YYYY-MM-DD/`; thresholds in flowlake.toml [security].
"""
from .core import Field, Record, REPORT_COUNT_AT, REPORT_DATE

_SEEN = (
    Field("first_seen", "timestamp_ms", "start of the earliest flow counted (UTC)"),
    Field("last_seen", "timestamp_ms", "end of the latest flow counted (UTC)"),
)

SCANNERS = Record(
    name="scanners",
    namespace="flowlake.security",
    doc=("Sources that contacted many distinct destinations (horizontal scan) or many distinct ports "
         "of one destination (vertical scan) with small flows (<= [security] scan_small_packets packets). "
         "Only small flows are counted as probes; a source is listed when its probes reach "
         "scan_min_destinations hosts or scan_min_ports ports on one host and at least "
         "scan_min_small_share of all its flows are probes."),
    fields=(
        Field("src_addr", "string", "the scanning source", address="one"),
        Field("kind", "string", "horizontal (many hosts), vertical (many ports of one host) or both"),
        Field("probe_flows", "long", "small flows from this source", "flows"),
        Field("flows", "long", "all flows from this source", "flows"),
        Field("small_share", "double", "probe_flows / flows", "fraction 0..1"),
        Field("distinct_destinations", "long", "distinct destination addresses probed"),
        Field("distinct_ports", "long", "distinct destination ports probed (all destinations)"),
        Field("max_ports_per_destination", "long", "most distinct ports probed on a single destination"),
        Field("top_port", "int", "destination port probed most often"),
        Field("packets", "long", "packets of the probe flows", "packets"),
        Field("bytes", "long", "bytes of the probe flows", "bytes"),
        Field("sample_targets", "string", "up to [security] sample_size probed destinations, comma separated", address="list"),
        Field("sample_ports", "string", "up to sample_size probed ports, ascending, comma separated"),
        *_SEEN,
        REPORT_COUNT_AT, REPORT_DATE,
    ),
)

FAN_IN = Record(
    name="fan_in",
    namespace="flowlake.security",
    doc=("Destinations receiving from unusually many distinct sources: robust z-score of the source "
         "count against the day's distribution over all destinations, z = (n - median) / (1.4826 * MAD) "
         "(MAD = 0: 1.2533 * mean absolute deviation). Listed when z >= fan_in_min_z and the count "
         ">= fan_in_min_sources."),
    fields=(
        Field("dst_addr", "string", "the destination", address="one"),
        Field("sources", "long", "distinct source addresses"),
        Field("flows", "long", "flows to this destination", "flows"),
        Field("packets", "long", "packets to this destination", "packets"),
        Field("bytes", "long", "bytes to this destination", "bytes"),
        Field("top_port", "int", "destination port receiving most flows"),
        Field("median_sources", "double", "median distinct-source count over all destinations of the day"),
        Field("mad_sources", "double", "median absolute deviation of that count"),
        Field("robust_z", "double", "(sources - median) / scale, see the table doc"),
        Field("sample_sources", "string", "up to sample_size sources, comma separated", address="list"),
        *_SEEN,
        REPORT_COUNT_AT, REPORT_DATE,
    ),
)

DAILY_HOSTS = Record(
    name="daily_hosts",
    namespace="flowlake.security",
    doc=("Every address seen on the day (as source or destination) with its totals: the compact "
         "history new_talkers compares against instead of re-reading N days of flows."),
    fields=(
        Field("address", "string", "IPv4 or IPv6 address", address="one"),
        Field("flows", "long", "flows with the address at either end", "flows"),
        Field("bytes", "long", "bytes of those flows", "bytes"),
        *_SEEN,
        REPORT_COUNT_AT, REPORT_DATE,
    ),
)

NEW_TALKERS = Record(
    name="new_talkers",
    namespace="flowlake.security",
    doc=("Addresses seen today but in none of the previous [security] new_talker_days days "
         "(from daily_hosts of those days; a day without daily_hosts is rebuilt from its flows)."),
    fields=(
        Field("address", "string", "IPv4 or IPv6 address", address="one"),
        Field("role", "string", "src, dst or both: at which end of today's flows it appeared"),
        Field("flows", "long", "today's flows with the address at either end", "flows"),
        Field("bytes", "long", "bytes of those flows", "bytes"),
        Field("peers", "long", "distinct addresses it exchanged flows with"),
        Field("history_days", "int", "previous days (of new_talker_days) that had flows to compare with"),
        *_SEEN,
        REPORT_COUNT_AT, REPORT_DATE,
    ),
)
