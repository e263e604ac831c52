"""Observation points (issue 34): where the site's flows were seen and how `[site] count_at`
counted them (jobs/count_once.py, job observation_points). One row per exporter and one for
the whole site (`exporter` = 'all')."""
from .core import REPORT_DATE, Field, Record

OBSERVATION_POINTS = Record(
    name="observation_points",
    namespace="flowlake.reports",
    doc=("The border as flowlake understands it, per day: each exporter, its external interfaces "
         "(classified by [[enrich.interface_rules]]), what it exports on (flow_direction: ingress, egress, "
         "both) and how the counting rule `[site] count_at` (jobs/count_once.py) counted its observations. "
         "An observation point is an exporter and a direction; observations of one flow are matched by "
         "addresses, ports, protocol and time (within `[site] dedup_window_seconds`). The row with "
         "`exporter` = 'all' is the site: `count_at` there is the rule every report of site traffic of "
         "that date was computed with (top talkers, traffic totals, protocol and app mix, ...), and "
         "`multi_point_share` the share of flows seen at more than one point. Per-exporter and "
         "per-interface views (interface_capacity, Collection) keep every observation."),
    fields=(
        Field("exporter", "string", "exporter address, or 'all' (the site)"),
        Field("exporter_name", "string", "exporter name ('' = unknown; 'all' for the site)"),
        Field("external_ifs", "string", "the exporter's interfaces classified external, 'ifIndex name' "
              "comma-separated ('' = none seen)"),
        Field("exports", "string", "ingress / egress / both (flow_direction; null direction counts as ingress)"),
        Field("classified", "boolean", "some of its interfaces carry a boundary (external / internal)"),
        Field("count_at", "string", "the rule applied to its observations: boundary / key / all "
              "(site row: the configured rule, auto / boundary / key / all)"),
        Field("observations", "long", "flow records it exported (every observation)", "records"),
        Field("counted", "long", "of those, the records the rule counts", "records"),
        Field("bytes_observed", "long", "bytes of every observation", "bytes"),
        Field("bytes_counted", "long", "bytes of the counted observations", "bytes"),
        Field("multi_point_share", "double", "share of its observations whose flow was seen at more than one "
              "point (site row: of the counted records, each flow once)", "fraction 0..1"),
        Field("contradictory", "long", "records of flows that enter and leave on external interfaces "
              "(transit, or contradictory direction data: e.g. ingress and egress both on an external "
              "interface): every rule but `all` counts such a flow once (site row: the counted records, "
              "one flow each)", "records"),
        REPORT_DATE,
    ),
    partition_by=("date",),
)
