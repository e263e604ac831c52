"""Alerts (issue 24): one row per alert, its current state, in `lake/alerts/date=D/`.

Written by the alerts service (pipelines/alerts/) as it opens, updates and resolves
alerts, and by `flowlake alerts ack|snooze`; D is the UTC date the alert started. An
alert is one (detector, subject) while its condition lasts: a second finding for the same
pair updates it instead of opening another.
"""
from .core import Field, Record

ALERT_JSON = ("id", "detector", "subject", "state", "severity", "started", "updated", "ended", "summary")
STATES = ("open", "acknowledged", "snoozed", "resolved")
SEVERITIES = ("info", "warning", "critical")

ALERTS = Record(
    name="alerts",
    namespace="flowlake.pipelines.lake",
    doc=("Alerts of the live detectors: `lake/alerts/date=YYYY-MM-DD/alerts.parquet`, one row per alert "
         "(its latest state), partitioned by the UTC date it started. Times are the flows' own time."),
    fields=(
        Field("id", "string", "alert id (12 hex digits), what `flowlake alerts show|ack|snooze` take"),
        Field("detector", "string", "scan, fan_in, interface_volume, exporter_volume, exporter_silent, "
                                    "new_talker, blocklist or ddos (an attack of lake/attacks, issue 36)"),
        Field("subject", "string", "what the alert is about: an address (bare, for a host), a prefix, "
                                   "an interface (exporter/ifIndex/in|out) or an exporter address"),
        Field("state", "string", "open, acknowledged, snoozed or resolved"),
        Field("severity", "string", "warning or critical (the highest while open)"),
        Field("started", "timestamp_ms", "end of the first interval in which the condition held (UTC)", "ms since epoch"),
        Field("updated", "timestamp_ms", "end of the latest interval in which it held (UTC)", "ms since epoch"),
        Field("ended", "timestamp_ms", "resolved: when the condition last held (UTC)", "ms since epoch", nullable=True),
        Field("resolved_at", "timestamp_ms", "when it was declared over, after [alerts] resolve_after_seconds "
                                             "without the condition", "ms since epoch", nullable=True),
        Field("summary", "string", "one line saying what was seen, with the figures"),
        Field("value", "double", "the detector's measure at its peak: scan, fan_in: times its threshold; "
                                 "interface_volume, exporter_volume: bit/s (or packet/s); exporter_silent: seconds "
                                 "without a flow; new_talker, blocklist: flows"),
        Field("threshold", "double", "what that measure had to reach"),
        Field("intervals", "long", "intervals in which the condition held"),
        Field("acked_at", "timestamp_ms", "acknowledged at (wall clock, UTC)", "ms since epoch", nullable=True),
        Field("acked_by", "string", "who acknowledged it", nullable=True),
        Field("snoozed_until", "timestamp_ms", "notifications muted until (wall clock, UTC)", "ms since epoch",
              nullable=True),
        Field("details", "string", "the detector's evidence as JSON (sample peers, ports, rates)"),
        Field("date", "string", "UTC date of started, YYYY-MM-DD (partition)"),
    ),
    partition_by=("date",),
)
