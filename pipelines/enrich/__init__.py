"""Flow enrichment at ingest (issue 21): every flow gets the names an operator thinks in.

One module per source, each pure (no Spark, no Kafka):
- mmdb.py       ASN, country and city from MaxMind-format databases (GeoLite2, DB-IP lite, IPinfo lite);
- networks.py   the operator's networks (CSV prefix file), longest prefix match;
- interfaces.py exporter and interface names from the SNMP poller's cache and static [exporters];
- classify.py   interface classification rules (boundary, connectivity, provider), as Akvorado's;
- apply.py      the columns of schemas/enrich.py computed over an Arrow table of flows;
- sources.py    the driver's side: validated snapshots of the files, hot reload, the status file.
The ingest (pipelines/flow_ingest.py) asks `sources` for a plan before each micro-batch and
every Spark task applies it to its tables (apply.enrich_table).
"""
