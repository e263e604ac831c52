"""Peering reports (issue 33): traffic by BGP neighbour, transit, origin AS and community,
the peering candidates and the exit paths, from the routing context the ingest puts on
every flow (Flow revision 4: dst_as_path, dst_communities, dst_large_communities,
bgp_next_hop) and the AS numbers ([routing] as_sources). Daily tables under
`lake/reports/<table>/date=D/`, written by jobs/peering.py; the Peering dashboard reads them.
"""
from .core import REPORT_COUNT_AT, REPORT_DATE, REPORT_HOUR, Field, Record
from .reports import _DIRECTION, _VOLUMES

# peering_traffic's dimensions
DIMENSIONS = ("neighbour_as", "transit", "origin_as", "community", "provider")

PEERING_TRAFFIC = Record(
    name="peering_traffic",
    namespace="flowlake.reports",
    doc=("Traffic per hour (and the whole day, hour null) and direction by a BGP dimension: "
         "`neighbour_as` = the first AS of the route to the destination (dst_as_path[0], the "
         "neighbour the traffic leaves through); `transit` = that neighbour where it carries the "
         "traffic on to another AS (an AS path of two or more); `origin_as` = the AS the remote end "
         "belongs to (dst_as for traffic towards a remote destination, src_as for traffic from a "
         "remote source, as [routing] as_sources filled them); `community` = each standard and "
         "large community of the route to the destination (a flow counts once under each of "
         "its communities); `provider` = the interface's provider from [enrich] interface_rules "
         "(the input interface for inbound traffic, the output one otherwise). Flows without a "
         "value (no route, AS 0, no community, no provider) are left out of that dimension. "
         "Shares are of the same hour, direction and dimension. Per hour, direction and dimension the "
         "top [reports] peering_top_n keys by bytes are kept; the rest add up in one row with key "
         "'(other)', so every list sums to its traffic and the table stays bounded."),
    fields=(
        REPORT_HOUR,
        _DIRECTION,
        Field("dimension", "string", "neighbour_as / transit / origin_as / community / provider"),
        Field("key", "string", "the AS number, community (65401:10 or 64501:1:2) or provider name; "
              "'(other)' = every key beyond the top [reports] peering_top_n"),
        *_VOLUMES,
        Field("bytes_share", "double", "bytes / all bytes of the same hour, direction and dimension",
              "fraction 0..1"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)

PEERING_CANDIDATES = Record(
    name="peering_candidates",
    namespace="flowlake.reports",
    doc=("Destination ASes reached through transit (an AS path of two or more: the neighbour is "
         "not the destination's own AS) with their day's volume and peak: the ASes a direct "
         "peering would take off the transit links, largest first. The peak is the highest "
         "five-minute average rate of the day (flows counted at their start)."),
    fields=(
        Field("rank", "int", "1 = most bytes"),
        Field("origin_as", "long", "the destination AS (last AS of dst_as_path)"),
        Field("transit_as", "long", "the neighbour that carried most of its bytes (dst_as_path[0])"),
        Field("transit_count", "int", "distinct neighbours its traffic left through"),
        Field("path_length", "double", "mean AS path length, bytes-weighted", "ASes"),
        *_VOLUMES,
        Field("peak_bps", "double", "highest five-minute average rate", "bit/s"),
        Field("peak_time", "timestamp_ms", "start of that five-minute interval (UTC)"),
        Field("bytes_share", "double", "bytes / all bytes sent through transit that day", "fraction 0..1"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)

EXIT_PATHS = Record(
    name="exit_paths",
    namespace="flowlake.reports",
    doc=("Share of the traffic towards routed destinations per exit path, per hour (and the whole "
         "day, hour null): the exporter, the BGP next hop (the flow's own, else its route's) and the "
         "neighbour AS (dst_as_path[0]). Flows without a route are left out."),
    fields=(
        REPORT_HOUR,
        Field("exporter", "string", "router that exported the flows"),
        Field("bgp_next_hop", "string", "BGP next hop ('' = none)"),
        Field("neighbour_as", "long", "first AS of the path"),
        *_VOLUMES,
        Field("bytes_share", "double", "bytes / all routed bytes of the same hour", "fraction 0..1"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)
