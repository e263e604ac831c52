"""Exporter health (issue 20): one row per exporter and nfcapd interval.

An exporter is a router's export process as nfcapd tells them apart: address,
observation domain (v9 source id, IPFIX observation domain, v5 engine id) and version.
The Go shipper writes one ExporterHealth record per exporter for every nfcapd file it
ships, in the same Kafka transaction as the file's flows (so exactly once, like them);
the ingest lands them in `lake/exporter_health/date=YYYY-MM-DD/`.

Figures come from the file itself: nfcapd's exporter stat record (datagrams received and
sequence failures since the previous file), its exporter and sampler records, and the
flows (counts, layouts, sampling rates, arrival times).
"""
from .core import Field, Record

_FIELDS = (
    Field("interval_start", "timestamp_ms", "nfcapd opened the file (start of the interval, UTC)", "ms since epoch"),
    Field("interval_end", "timestamp_ms", "nfcapd closed the file (end of the interval, UTC)", "ms since epoch"),
    Field("exporter", "string", "router address (as in the flows' exporter column)"),
    Field("observation_domain", "long", "v9 source id / IPFIX observation domain id / v5 engine id"),
    Field("version", "int", "NetFlow version: 5, 9 or 10 (IPFIX)"),
    Field("flows", "long", "flow records received in the interval", "flows"),
    Field("packets", "long", "packets of those flows (sampling-corrected)", "packets"),
    Field("bytes", "long", "bytes of those flows (sampling-corrected)", "bytes"),
    Field("flows_per_s", "double", "flows / interval length", "flows/s"),
    Field("bytes_per_s", "double", "bytes / interval length", "bytes/s"),
    Field("datagrams", "long", "export datagrams nfcapd received from the exporter (its exporter stat record)", "datagrams"),
    Field("sequence_failures", "long",
          "gaps in the exporter's sequence numbers nfcapd detected: datagrams lost (or reordered) between "
          "router and collector; a run of consecutive lost datagrams is one failure"),
    Field("templates", "int", "distinct flow record layouts decoded (one per data template; templates with the same fields count once)"),
    Field("template_layouts", "string",
          "those layouts: v<version>:<nfdump extension ids>, space separated (a change means the router changed its templates)"),
    Field("samplers", "int", "sampler records (v9/IPFIX option data, or nfcapd's -s default) seen for the exporter"),
    Field("sampler_rates", "string", "each sampler as id=1:N, space separated (id < 0: nfcapd's default/generic sampler)"),
    Field("sampling_rates", "string", "distinct 1:N rates applied to the interval's flows, ascending, comma separated"),
    Field("clock_skew_ms", "long",
          "router clock minus collector clock, estimated as the largest (flow end - its arrival) in the interval: "
          "> 0 the router runs ahead (flows end after they arrive); a small negative value is export delay",
          "ms", nullable=True),
    Field("last_seen", "timestamp_ms", "latest flow arrival from this exporter up to this interval (UTC)",
          "ms since epoch", nullable=True),
    Field("silent", "boolean", "no flow for [health] silent_after_seconds or more at interval_end"),
    Field("source_file", "string", "nfcapd file the figures come from (path below the spool)"),
)

EXPORTER_HEALTH_RECORD = Record(
    name="ExporterHealth",
    namespace="flowlake.v1",
    doc="Health of one exporter over one nfcapd interval, as published to Kafka health.v1 (Avro single-object encoding).",
    fields=_FIELDS,
)

EXPORTER_HEALTH = Record(
    name="exporter_health",
    namespace="flowlake.pipelines.lake",
    doc=("Exporter health history: `lake/exporter_health/date=YYYY-MM-DD/*.parquet`, one row per exporter "
         "(address, observation domain) and nfcapd interval, partitioned by the UTC date of interval_start."),
    fields=_FIELDS + (Field("date", "string", "UTC date of interval_start, YYYY-MM-DD (partition)"),),
    partition_by=("date",),
)
