"""Mitigations (issue 36): every announcement and withdraw of the BGP mitigation, and every
decision the operator should be able to audit (a refused or failed announcement, dry-run),
one row per event, in the Delta table `lake/mitigations/` partitioned by the UTC date of
the event.

Written by the mitigation loop (pipelines/mitigation/service.py) and by `flowlake mitigation
announce|withdraw` (the operator's requests); read by `flowlake mitigation list --events`.
"""
from .core import Field, Record

ACTIONS = ("announce", "withdraw", "failed", "refused", "dry-run-announce", "dry-run-withdraw",
           "operator-announce", "operator-withdraw")
METHODS = ("rtbh", "flowspec")
ORIGINS = ("auto", "operator")

MITIGATIONS = Record(
    name="mitigations",
    namespace="flowlake.pipelines.lake",
    doc=("BGP mitigation events: `lake/mitigations/` (Delta, partition date), one row per announcement, "
         "withdraw, failure, refusal or dry-run decision, with its reason. Times are the wall clock."),
    fields=(
        Field("time", "timestamp_ms", "when it happened (UTC, wall clock)", "ms since epoch"),
        Field("action", "string", "announce (the route reached the router's session), withdraw, failed "
                                  "(not delivered: the reason says why; retried), refused (a safety rule), "
                                  "dry-run-announce, dry-run-withdraw ([ddos] mitigation = dry-run: nothing "
                                  "sent), operator-announce, operator-withdraw (`flowlake mitigation` requests)"),
        Field("method", "string", "rtbh (the prefix with the blackhole community) or flowspec (a drop or "
                                  "rate-limit rule)"),
        Field("prefix", "string", "the destination announced: the victim's /32 or /128 (or its prefix)",
              address="one"),
        Field("route", "string", "the route as gobgp names it: the prefix (RTBH) or the flowspec rule, "
                                 "e.g. `[destination: 192.0.2.10/32][protocol: ==udp][source-port: ==123]`"),
        Field("attack_ids", "string", "the attacks it mitigates (ids of `flowlake attacks`), comma-separated; "
                                      "empty for the operator's own"),
        Field("origin", "string", "auto (the mitigation loop, from an attack) or operator"),
        Field("reason", "string", "why: the attack and its figures, the safety rule, the failure, the "
                                  "hold-down, the operator's words"),
        Field("community", "string", "RTBH: the blackhole community sent", nullable=True),
        Field("next_hop", "string", "RTBH: the next hop sent", nullable=True),
        Field("neighbor", "string", "the router's address ([ddos] neighbor; empty in dry-run)"),
        Field("session", "string", "the BGP session's state at the time (established, active, ...; dry-run)"),
        Field("user", "string", "who: the operator's login for operator actions, `flowlake` for the loop"),
        Field("date", "string", "UTC date of time, YYYY-MM-DD (partition)"),
    ),
    partition_by=("date",),
)
