"""The flow record: one per flow, from nfcapd files through Kafka into the lake."""
from .core import Field, Record
from .enrich import ENRICHMENT_FIELDS

FLOW = Record(
    name="Flow",
    namespace="flowlake.v1",
    doc="One NetFlow/IPFIX flow as collected by nfcapd, packets and bytes corrected for sampling.",
    fields=(
        Field("time_start", "timestamp_ms", "first packet of the flow (UTC)", "ms since epoch"),
        Field("time_end", "timestamp_ms", "last packet of the flow (UTC)", "ms since epoch"),
        Field("exporter", "string", "address of the router that exported the flow"),
        Field("input_if", "long", "SNMP index of the input interface"),
        Field("output_if", "long", "SNMP index of the output interface"),
        Field("src_addr", "string", "source address, IPv4 dotted or IPv6 text", address="one"),
        Field("dst_addr", "string", "destination address, IPv4 dotted or IPv6 text", address="one"),
        Field("src_port", "int", "source port (0 for ICMP and portless protocols)"),
        Field("dst_port", "int", "destination port (ICMP: type*256+code)"),
        Field("proto", "int", "IP protocol number (6 TCP, 17 UDP, 1 ICMP, ...)"),
        Field("tcp_flags", "int", "cumulative OR of TCP flags"),
        Field("tos", "int", "source type of service byte"),
        Field("packets", "long", "packets, multiplied by the sampling rate", "packets"),
        Field("bytes", "long", "bytes at layer 3, multiplied by the sampling rate", "bytes"),
        Field("sampling_rate", "int", "1:N packet sampling flowlake applied (1 = unsampled, 0 = unknown: wire counts)"),
        Field("src_as", "long", "source autonomous system number"),
        Field("dst_as", "long", "destination autonomous system number"),
        Field("source_file", "string", "nfcapd file the flow was read from (path below the spool)"),
        Field("file_seq", "long", "position of the flow in its nfcapd file, from 0 "
              "(the reverse half of a biflow: -(its initiator's + 1))"),
        # revision 2 (issue 26): VLANs; 0 = the exporter sent none, null = landed before flowlake read them
        Field("src_vlan", "int", "ingress VLAN id (IPFIX vlanId 58, NetFlow v9 SRC_VLAN 58; 0 = none)",
              nullable=True, default=0),
        Field("dst_vlan", "int", "egress VLAN id (IPFIX postVlanId 59, NetFlow v9 DST_VLAN 59; 0 = none)",
              nullable=True, default=0),
        # revision 3 (issue 32): every other field nfcapd 1.7.1 keeps. All nullable, no
        # default: null = the record carried no such element, or landed before revision 3.
        Field("flow_direction", "int", "flow direction as exported (IE 61 flowDirection: 0 ingress, 1 egress)",
              nullable=True),
        Field("next_hop", "string", "IP next hop, address text (IE 15 ipNextHopIPv4Address / 62 IPv6)",
              nullable=True, address="one"),
        Field("bgp_next_hop", "string", "BGP next hop, address text (IE 18 bgpNextHopIPv4Address / 63 IPv6)",
              nullable=True, address="one"),
        Field("src_mask", "int", "source prefix length (IE 9 sourceIPv4PrefixLength / 29 IPv6)", "bits",
              nullable=True),
        Field("dst_mask", "int", "destination prefix length (IE 13 destinationIPv4PrefixLength / 30 IPv6)", "bits",
              nullable=True),
        Field("src_mac", "string", "source MAC address aa:bb:cc:dd:ee:ff (IE 56 sourceMacAddress, as received)",
              nullable=True),
        Field("dst_mac", "string", "destination MAC address aa:bb:cc:dd:ee:ff (IE 80 destinationMacAddress, as received)",
              nullable=True),
        Field("mpls_labels", "array_int", "MPLS label values, top of stack first (IEs 70-79, 20-bit labels)",
              nullable=True),
        Field("ingress_vrf", "long", "ingress VRF id (IE 234 ingressVRFID)", nullable=True),
        Field("egress_vrf", "long", "egress VRF id (IE 235 egressVRFID)", nullable=True),
        Field("forwarding_status", "int",
              "forwarding status as exported (IE 89: 0-63 unknown, 64-127 forwarded, 128-191 dropped, 192-255 consumed)",
              nullable=True),
        Field("icmp_type", "int", "ICMP/ICMPv6 type (proto 1/58 only: dst_port // 256)", nullable=True),
        Field("icmp_code", "int", "ICMP/ICMPv6 code (proto 1/58 only: dst_port % 256)", nullable=True),
        Field("src_addr_nat", "string", "source address after NAT (IE 225 postNATSourceIPv4Address / 281 IPv6)",
              nullable=True, address="one"),
        Field("dst_addr_nat", "string", "destination address after NAT (IE 226 postNATDestinationIPv4Address / 282 IPv6)",
              nullable=True, address="one"),
        Field("src_port_nat", "int", "source port after NAPT (IE 227 postNAPTSourceTransportPort)", nullable=True),
        Field("dst_port_nat", "int", "destination port after NAPT (IE 228 postNAPTDestinationTransportPort)",
              nullable=True),
        Field("nat_event", "int", "NAT event (IE 230 natEvent: 1 create, 2 delete, ...)", nullable=True),
        Field("biflow_half", "int",
              "0 a one-way record; 1 the initiator's half of a biflow (as recorded), 2 its reverse half "
              "(addresses, ports, interfaces, MACs, masks, AS and VLANs swapped, counted from the out counters)",
              nullable=True),
        # revision 4 (issue 33): the routing context, filled at ingest from the exporter's BGP
        # table (collectors/routing, BMP) as it stands when the flow is ingested. The shipper
        # writes null; the ingest writes the explicit unknown (empty list, empty text) when no
        # route matched or routing is off; null = landed before revision 4.
        Field("dst_as_path", "array_long",
              "AS path of the route to dst_addr, neighbour AS first, origin AS last (empty: no route)",
              nullable=True),
        Field("dst_communities", "array_string", "BGP communities of that route, as text 65401:10 (RFC 1997)",
              nullable=True),
        Field("dst_large_communities", "array_string",
              "BGP large communities of that route, as text 64501:1:2 (RFC 8092)", nullable=True),
        Field("dst_prefix", "string", "the prefix dst_addr matched in the routing table ('' = none)",
              nullable=True),
        Field("src_prefix", "string", "the prefix src_addr matched in the routing table ('' = none)",
              nullable=True),
    ),
)

# Fields of the wire record the shipper leaves null and the ingest fills (revision 4's
# routing context: pipelines/enrich/routing.py); the shipper knows every other field.
FILLED_AT_INGEST = ("dst_as_path", "dst_communities", "dst_large_communities", "dst_prefix", "src_prefix")

# Earlier revisions of the Flow record, oldest first, the current one last. Messages of an
# earlier revision (still in Kafka after an upgrade) are recognised by their fingerprint and
# read with their own declaration; fields added since take their default
# (pipelines/flow_messages.py). Never edit a revision once shipped: add one.
FLOW_REV1 = Record(name=FLOW.name, namespace=FLOW.namespace, doc=FLOW.doc, fields=FLOW.fields[:19])
FLOW_REV2 = Record(name=FLOW.name, namespace=FLOW.namespace, doc=FLOW.doc, fields=FLOW.fields[:21])
FLOW_REV3 = Record(name=FLOW.name, namespace=FLOW.namespace, doc=FLOW.doc, fields=FLOW.fields[:40])
FLOW_REVISIONS = (FLOW_REV1, FLOW_REV2, FLOW_REV3, FLOW)

# The lake table adds the enrichment columns the ingest fills (schemas/enrich.py; null
# on days written before them) and the partition columns derived from time_start (UTC).
FLOWS_TABLE = Record(
    name="flows",
    namespace="flowlake.pipelines.lake",
    doc="The flow lake: `lake/flows/date=YYYY-MM-DD/hour=HH/*.parquet` (zstd).",
    fields=FLOW.fields + ENRICHMENT_FIELDS + (
        Field("run_id", "string", "lab run the flow belongs to (`flowlake lab run`); '' for other flows", nullable=True),
        Field("date", "string", "UTC date of time_start, YYYY-MM-DD (partition)"),
        Field("hour", "int", "UTC hour of time_start, 0-23 (partition)"),
    ),
    partition_by=("date", "hour"),
)
