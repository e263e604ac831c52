"""Border breakdowns (issue 26, after SLAC's passive monitoring): traffic by VLAN, by the
remote end's domain (reverse DNS) and by flow duration ("flow times"). Daily tables
under `lake/reports/<table>/date=D/`, written by jobs/vlan_mix.py, jobs/remote_domains.py
and jobs/flow_durations.py. Directions and volumes as in schemas/reports.py."""
from .core import Field, Record, REPORT_COUNT_AT, REPORT_DATE, REPORT_HOUR
from .reports import _DIRECTION, _VOLUMES

# (lower edge s, upper edge s or None, label): duration = time_end - time_start
DURATION_CLASSES = (
    (0.0, 1.0, "0-1 s"), (1.0, 10.0, "1-10 s"), (10.0, 60.0, "10-60 s"),
    (60.0, 300.0, "1-5 min"), (300.0, 1800.0, "5-30 min"), (1800.0, None, ">= 30 min"),
)
UNKNOWN_NAME = "(unknown)"          # no PTR, timed out, or not looked up (budget, max_lookups)
NO_DOMAIN = "(no registered domain)"  # a name under no public suffix (router.lan)

REMOTE_DOMAINS = Record(
    name="remote_domains",
    namespace="flowlake.reports",
    doc=("Traffic by the remote end's reverse-DNS name, reduced to its registered domain "
         "(`level` = 'domain', by the Public Suffix List: www.slac.stanford.edu -> stanford.edu) and "
         "its top-level domain (`level` = 'tld': edu). The remote end is the side outside "
         "`[site] local_prefixes`: the source of inbound flows, the destination of outbound ones "
         "(internal and transit flows have no single remote end and are left out). Names come from "
         "jobs/rdns.py ([rdns]: cached, rate-limited, bounded per report); addresses without a "
         f"name (no PTR, timed out, beyond the budget) are `{UNKNOWN_NAME}`."),
    fields=(
        Field("direction", "string", "all / inbound (remote = source) / outbound (remote = destination)"),
        Field("level", "string", "domain (registered domain) / tld (top-level domain)"),
        Field("name", "string", f"registered domain or TLD; {UNKNOWN_NAME} or {NO_DOMAIN}"),
        Field("rank", "int", "1 = most bytes within direction and level"),
        *_VOLUMES,
        Field("hosts", "long", "distinct remote addresses", "addresses"),
        Field("flows_share", "double", "flows / all flows of the direction with a remote end", "fraction 0..1"),
        Field("bytes_share", "double", "bytes / all bytes of the direction with a remote end", "fraction 0..1"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)

FLOW_DURATIONS = Record(
    name="flow_durations",
    namespace="flowlake.reports",
    doc=("Flow times: the distribution of flow durations (time_end - time_start; a flow cut by the "
         "router's active timeout counts per record, as nfdump does) per direction. `section` = "
         "'class': one row per duration class (" + ", ".join(c[2] for c in DURATION_CLASSES) +
         ") and one with duration_class 'all'; `section` = 'app': the top `reports.top_n` "
         "applications (port map, as app_mix) by total flow time (sum of durations). Percentiles by "
         "nearest rank (Spark percentile_approx, exact below 10,000 flows per group, rank error "
         "at most 1/10,000 of the flows above)."),
    fields=(
        _DIRECTION,
        Field("section", "string", "class (by duration class) / app (top applications by flow time)"),
        Field("duration_class", "string", "duration class label, or 'all' (section class; null for app)", nullable=True),
        Field("class_lower_s", "double", "the class's lower edge (0 for 'all'; sorts the classes)", "s", nullable=True),
        Field("app", "string", "application label (section app; null for class)", nullable=True),
        Field("rank", "int", "1 = longest total flow time (section app; null for class)", nullable=True),
        *_VOLUMES,
        Field("flows_share", "double", "flows / all flows of the direction", "fraction 0..1"),
        Field("bytes_share", "double", "bytes / all bytes of the direction", "fraction 0..1"),
        Field("duration_total_s", "double", "sum of the flows' durations (flow time)", "s"),
        Field("duration_mean_s", "double", "mean duration", "s"),
        Field("duration_p50_s", "double", "median duration (nearest rank)", "s"),
        Field("duration_p90_s", "double", "90th percentile of durations (nearest rank)", "s"),
        Field("duration_p99_s", "double", "99th percentile of durations (nearest rank)", "s"),
        Field("duration_max_s", "double", "longest duration", "s"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)

VLAN_MIX = Record(
    name="vlan_mix",
    namespace="flowlake.reports",
    doc=("Traffic by VLAN for each hour (and the whole day, hour null) and direction: `side` = 'in' "
         "counts flows by their ingress VLAN (src_vlan: IPFIX vlanId 58 / dot1qVlanId 243, NetFlow v9 "
         "SRC_VLAN 58), 'out' by their egress VLAN (dst_vlan: postVlanId 59 / postDot1qVlanId 254, "
         "DST_VLAN 59). VLAN 0 = the exporter sent none. Shares are of the same hour, direction and side."),
    fields=(
        REPORT_HOUR,
        _DIRECTION,
        Field("side", "string", "in (ingress VLAN, src_vlan) / out (egress VLAN, dst_vlan)"),
        Field("vlan", "int", "802.1Q VLAN id, 0 = none"),
        *_VOLUMES,
        Field("flows_share", "double", "flows / all flows of the same hour, direction and side", "fraction 0..1"),
        Field("packets_share", "double", "packets / all packets of the same hour, direction and side", "fraction 0..1"),
        Field("bytes_share", "double", "bytes / all bytes of the same hour, direction and side", "fraction 0..1"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)
