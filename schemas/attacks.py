"""Attacks (issue 36): volumetric DDoS attacks on the operator's addresses, one row per
attack (its latest state), in the Delta table `lake/attacks/` partitioned by the UTC date
the attack started.

Written by the DDoS detector of the alerts service (pipelines/alerts/ddos.py) as attacks
open, grow and end; read by `flowlake attacks list|show`, `flowlake status` and the
Attacks dashboard. Times are the flows' own time, but `detected_at` (wall clock).
"""
from .core import Field, Record

ATTACK_CLASSES = ("amplification", "fragments", "syn", "icmp", "udp", "total")
SCOPES = ("host", "prefix")
# `flowlake attacks list --json`: these keys at least (issue 36's contract with the mitigation half)
ATTACK_JSON = ("id", "victim", "scope", "attack_class", "protocol", "peak_pps", "peak_bps", "peak_flows",
               "started", "updated", "ended", "mitigation")

ATTACKS = Record(
    name="attacks",
    namespace="flowlake.pipelines.lake",
    doc=("Volumetric attacks seen by the DDoS detector: `lake/attacks/` (Delta, partition date), one row "
         "per attack (its latest state), partitioned by the UTC date it started."),
    fields=(
        Field("id", "string", "attack id (12 hex digits), what `flowlake attacks show` takes"),
        Field("victim", "string", "the attacked address (scope host) or prefix (scope prefix: a carpet bomb)",
              address="one"),
        Field("scope", "string", "host (one address over its thresholds) or prefix (traffic spread over a "
                                 "prefix's hosts, [ddos] prefix_length_v4/_v6)"),
        Field("attack_class", "string", "amplification (UDP from an amplifier's source port), fragments, syn "
                                        "(TCP SYN without ACK), icmp, udp, or total (no single class over its "
                                        "threshold, all traffic together is)"),
        Field("protocol", "int", "IP protocol carrying most of the attack's packets"),
        Field("peak_pps", "double", "highest packet rate of the attack class over [ddos] window_seconds",
              "packets/s"),
        Field("peak_bps", "double", "highest bit rate of the attack class over [ddos] window_seconds", "bits/s"),
        Field("peak_flows", "double", "highest rate of new flows of the attack class", "flows/s"),
        Field("threshold", "string", "what was crossed at the peak, e.g. `pps >= 20000 (absolute)` or "
                                     "`pps >= 10 x baseline 812`"),
        Field("top_sources", "string", "sources sending the most packets, comma-separated, most first",
              address="list"),
        Field("src_ports", "string", "source ports carrying the most packets, comma-separated"),
        Field("dst_ports", "string", "destination ports carrying the most packets, comma-separated"),
        Field("countries", "string", "countries of the top sources (ISO codes; empty without [enrich] "
                                     "geo_database), comma-separated"),
        Field("exporters", "string", "routers the attack enters by (exporter addresses), comma-separated"),
        Field("input_interfaces", "string", "interfaces it enters by, exporter/ifIndex, comma-separated"),
        Field("hosts", "long", "addresses of the victim receiving attack traffic (1 for scope host)"),
        Field("packets", "double", "packets of the attack class counted while it lasted (sampling scaled)",
              "packets"),
        Field("bytes", "double", "bytes of the attack class counted while it lasted (sampling scaled)", "bytes"),
        Field("intervals", "long", "rotated intervals in which the attack held"),
        Field("started", "timestamp_ms", "first packet of the attack class in the first interval it held (UTC)",
              "ms since epoch"),
        Field("updated", "timestamp_ms", "end of the latest interval in which it held (UTC)", "ms since epoch"),
        Field("ended", "timestamp_ms", "ended: when it last held, once [ddos] end_after_seconds passed "
                                       "without it (UTC); null while open", "ms since epoch", nullable=True),
        Field("detected_at", "timestamp_ms", "wall clock when the attack record was opened (UTC)",
              "ms since epoch"),
        Field("date", "string", "UTC date of started, YYYY-MM-DD (partition)"),
    ),
    partition_by=("date",),
)
