"""Operators' views of flow record revision 3 (issue 32 part 5): the forwarding status of
flows per exporter (drops and their reasons) and traffic by MPLS top label and VRF. Daily
tables under `lake/reports/<table>/date=D/`, written by jobs/forwarding_status.py and
jobs/mpls_vrf_mix.py. Directions and volumes as in schemas/reports.py."""
from .core import REPORT_COUNT_AT, REPORT_DATE, REPORT_HOUR, Field, Record
from .reports import _DIRECTION, _VOLUMES

# IANA IE 89 forwardingStatus (RFC 7270 section 4.12): the top two bits of the octet are the
# status, the low six bits the reason code within it.
STATUS_CLASSES = {0: "unknown", 1: "forwarded", 2: "dropped", 3: "consumed"}
NOT_EXPORTED = "not exported"   # the flow carries no forwardingStatus (null)
OUT_OF_RANGE = "out of range"   # a value above 255: not an IE 89 octet
# reason names of the IANA registry "forwardingStatus (Value 89)", by the whole value
REASON_NAMES = {
    0: "unknown",
    64: "unknown", 65: "fragmented", 66: "not fragmented",
    128: "unknown", 129: "ACL deny", 130: "ACL drop", 131: "unroutable", 132: "adjacency",
    133: "fragmentation and DF set", 134: "bad header checksum", 135: "bad total length",
    136: "bad header length", 137: "bad TTL", 138: "policer", 139: "WRED", 140: "RPF",
    141: "for us", 142: "bad output interface", 143: "hardware",
    192: "unknown", 193: "punt adjacency", 194: "incomplete adjacency", 195: "for us",
}
TOP_REASONS = 5  # reason rows per exporter and class

FORWARDING_STATUS = Record(
    name="forwarding_status",
    namespace="flowlake.reports",
    doc=("Flows, packets and bytes per exporter and forwarding-status class for the day, from the "
         "flows' `forwarding_status` (IPFIX/NetFlow v9 IE 89, RFC 7270: status = the top two bits "
         "of the octet: " + ", ".join(f"{k * 64}-{k * 64 + 63} {v}" for k, v in STATUS_CLASSES.items()) +
         f"; reason = the low six bits). Flows without the element are class '{NOT_EXPORTED}', values "
         f"above 255 '{OUT_OF_RANGE}'. One row per exporter and class with reason null (all its "
         f"flows), and up to {TOP_REASONS} rows with the class's top reason codes by bytes (rank 1 = most)."),
    fields=(
        Field("exporter", "string", "exporter (router) address"),
        Field("status_class", "string",
              "forwarded / dropped / consumed / unknown / " + NOT_EXPORTED + " / " + OUT_OF_RANGE),
        Field("status", "int", "the status: top two bits of IE 89 (0 unknown, 1 forwarded, 2 dropped, "
              "3 consumed); null when not exported or out of range", nullable=True),
        Field("reason", "int", "reason code: the low six bits of IE 89; null on the class's total row",
              nullable=True),
        Field("forwarding_status", "int", "IE 89 as exported (status * 64 + reason); null on the class's total row",
              nullable=True),
        Field("reason_name", "string", "the reason's name in the IANA registry ('' when unassigned); "
              "null on the class's total row", nullable=True),
        Field("rank", "int", "1 = the class's reason with the most bytes; null on the class's total row",
              nullable=True),
        *_VOLUMES,
        Field("bytes_share", "double", "bytes / all bytes of the exporter that day", "fraction 0..1"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)

MPLS_VRF_MIX = Record(
    name="mpls_vrf_mix",
    namespace="flowlake.reports",
    doc=("Traffic by MPLS top label and by VRF for each hour (and the whole day, hour null) and "
         "direction, where the exporters send them: `side` = 'mpls' counts flows by the top label "
         "of their stack (mpls_labels[0]: IPFIX mplsTopLabelStackSection 70 / NetFlow v9 MPLS_LABEL_1), "
         "'vrf_in' by ingress_vrf (IE 234) and 'vrf_out' by egress_vrf (IE 235). `value` null = the "
         "flow has none (no label stack, no VRF exported). The top [reports] mpls_vrf_top_n values by "
         "bytes are kept per hour, direction and side; the rest add up in one row with value -1 "
         "('(other)'). Shares are of the same hour, direction and side."),
    fields=(
        REPORT_HOUR,
        _DIRECTION,
        Field("side", "string", "mpls (top label) / vrf_in (ingress VRF) / vrf_out (egress VRF)"),
        Field("value", "long", "the label (20-bit value) or VRF id; null = none; -1 = every value beyond "
              "the top [reports] mpls_vrf_top_n", nullable=True),
        Field("value_label", "string",
              "'label N', 'vrf N', '(none)' or '(other)': the value as the dashboards show it"),
        *_VOLUMES,
        Field("flows_share", "double", "flows / all flows of the same hour, direction and side", "fraction 0..1"),
        Field("packets_share", "double", "packets / all packets of the same hour, direction and side", "fraction 0..1"),
        Field("bytes_share", "double", "bytes / all bytes of the same hour, direction and side", "fraction 0..1"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)
