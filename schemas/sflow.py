"""sFlow agents' health (issue 35): one row per agent, sub-agent and interval.

sfcapd (nfdump's sFlow collector) counts no sequence gaps and keeps no counter samples;
the sFlow tap (collectors/shipper/sflowtap.go, sflowlake.go) reads a copy of every datagram
on the sFlow port and writes, every [collector] sflow_flush_seconds, these rows into
`lake/sflow_agent_health/date=YYYY-MM-DD/` and the agents' generic interface counters
into `lake/interface_counters/` (schemas/snmp.py INTERFACE_COUNTERS, files `sflow_*`).
"""
from .core import Field, Record

SFLOW_AGENT_HEALTH = Record(
    name="sflow_agent_health",
    namespace="flowlake.pipelines.lake",
    doc=("sFlow agent health: `lake/sflow_agent_health/date=YYYY-MM-DD/`, one row per sFlow agent address, "
         "sub-agent and tap interval (written by the sFlow tap), partitioned by the UTC date of interval_start; "
         "days before yesterday merged into one file, kept [retention] sflow_agent_health_days."),
    fields=(
        Field("interval_start", "timestamp_ms", "start of the interval (the agent's first datagram in it, or the "
                                                "previous interval's end)", "ms since epoch"),
        Field("interval_end", "timestamp_ms", "end of the interval: when the tap wrote the row", "ms since epoch"),
        Field("agent", "string", "sFlow agent address inside the datagrams (the flows' exporter column)"),
        Field("sub_agent", "long", "sFlow sub-agent id (the flows' observation domain)"),
        Field("senders", "string", "UDP source addresses the datagrams came from, space separated (differ from "
                                   "the agent behind NAT or a relay)"),
        Field("datagrams", "long", "datagrams received in the interval", "datagrams"),
        Field("lost", "long", "datagrams missing from the agent's sequence numbers (gaps, less late arrivals: "
                              "exact, not one per run)", "datagrams"),
        Field("restarts", "long", "times the sequence numbers went back: the agent restarted its numbering"),
        Field("reordered", "long", "datagrams that came late or twice", "datagrams"),
        Field("flow_samples", "long", "flow samples (compact and expanded)", "samples"),
        Field("counter_samples", "long", "counter samples (compact and expanded)", "samples"),
        Field("discard_samples", "long", "dropped-packet samples: discarded packet samples and flow samples whose "
                                         "output is a discard code", "samples"),
        Field("other_samples", "long", "samples of unknown or enterprise formats (skipped)", "samples"),
        Field("agent_drops", "long", "samples the agent itself dropped (its flow samples' drops field, summed)",
              "samples"),
        Field("samples_per_s", "double", "samples of every kind / interval length", "samples/s"),
        Field("sampling_rates", "string", "distinct 1:N rates of the interval's flow samples, ascending, comma "
                                          "separated"),
        Field("bad", "long", "samples and datagrams of this agent that could not be read, plus sequence restarts"),
        Field("bad_reasons", "string", "those by reason: 'reason=count, ...' (truncated samples, unknown sample "
                                       "formats, sequence restarts, ...)"),
        Field("date", "string", "UTC date of interval_start, YYYY-MM-DD (partition)"),
    ),
    partition_by=("date",),
)
