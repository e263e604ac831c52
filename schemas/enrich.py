"""Flow enrichment (issue 21): the lake columns the ingest adds to every flow, and the
report table of the top ASes, countries, interfaces, providers and networks.

The columns carry Akvorado's names. The ingest fills them (pipelines/enrich/) from the
exporter and interface names (SNMP poller's cache, static [exporters] definitions), the
interface classification rules, the MaxMind-format ASN/geo databases and the operator's
networks file. Unknown is explicit: an empty string (0 for numbers), never a guess.
Lake days written before enrichment lack these columns: readers see null there.
The AS numbers themselves (`src_as`, `dst_as`) are in the wire record: the router's when
it exports them, else the ASN database's, filled at ingest.
"""
from .core import Field, Record, REPORT_COUNT_AT, REPORT_DATE, REPORT_HOUR


def _interface(side: str, what: str) -> tuple[Field, ...]:
    p = f"{side}_if_"
    return (
        Field(p + "name", "string", f"{what} interface name (ifName; static [exporters] wins; '' = unknown)", nullable=True),
        Field(p + "description", "string", f"{what} interface description (ifAlias; '' = unknown)", nullable=True),
        Field(p + "speed", "long", f"{what} interface speed (ifHighSpeed; 0 = unknown)", "Mbit/s", nullable=True),
        Field(p + "boundary", "string", f"{what} interface boundary from [enrich] interface_rules: external / internal "
              "('' = unclassified)", nullable=True),
        Field(p + "connectivity", "string", f"{what} interface connectivity from the rules: transit, peering, ix, "
              "customer, ... ('' = unclassified)", nullable=True),
        Field(p + "provider", "string", f"{what} interface provider from the rules ('' = unclassified)", nullable=True),
    )


def _address(side: str, what: str) -> tuple[Field, ...]:
    return (
        Field(f"{side}_country", "string", f"{what} country, ISO 3166 alpha-2 from [enrich] geo_database ('' = unknown)",
              nullable=True),
        Field(f"{side}_city", "string", f"{what} city (English name) where the geo database has cities ('' = unknown)",
              nullable=True),
        *(Field(f"{side}_net_{k}", "string", f"{what} network's {k} from [enrich] networks, longest prefix match "
                "('' = not in the file)", nullable=True)
          for k in ("name", "role", "site", "region", "tenant")),
    )


ENRICHMENT_FIELDS = (
    Field("exporter_name", "string", "exporter name: static [exporters.\"ADDR\"] name, else SNMP sysName ('' = unknown)",
          nullable=True),
    *_interface("in", "input"),
    *_interface("out", "output"),
    *_address("src", "source"),
    *_address("dst", "destination"),
)
ENRICHMENT_NAMES = tuple(f.name for f in ENRICHMENT_FIELDS)

ENRICHED_TOP = Record(
    name="enriched_top",
    namespace="flowlake.reports",
    doc=("Top values per hour (and whole day) of the enrichment dimensions (job enriched_top): ASes, countries, "
         "interfaces (exporter name and interface name), providers and the operator's networks, on the input "
         "side (`side` in: source AS/country/network, input interface and its provider) and the output side "
         "(out: destination, output interface). The top [reports] top_n values by bytes per hour, dimension and "
         "side; the rest is summed in one `other` row, so every hour's rows add up to all its traffic. "
         "An empty value is unknown (not enriched, or a lake day written before enrichment)."),
    fields=(
        REPORT_HOUR,
        Field("dimension", "string", "as / country / interface / provider / network"),
        Field("side", "string", "in (source, input interface) / out (destination, output interface)"),
        Field("value", "string", "the AS number, country code, 'exporter interface', provider or network name; "
              "'' = unknown, 'other' = outside the top N"),
        Field("rank", "int", "1 = most bytes; rank top_n + 1 for the 'other' row"),
        Field("flows", "long", "flow records", "flows"),
        Field("packets", "long", "packets (sampling-corrected)", "packets"),
        Field("bytes", "long", "bytes at layer 3 (sampling-corrected)", "bytes"),
        Field("bytes_share", "double", "bytes / all bytes of the hour (or day)", "fraction 0..1"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)
