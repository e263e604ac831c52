"""IANA protocol numbers and the names reports and rollups print for them."""

PROTO_NAMES = {
    1: "ICMP", 2: "IGMP", 4: "IPIP", 6: "TCP", 8: "EGP", 17: "UDP", 27: "RDP", 41: "IPv6",
    43: "IPv6-Route", 44: "IPv6-Frag", 46: "RSVP", 47: "GRE", 50: "ESP", 51: "AH",
    58: "ICMPv6", 59: "IPv6-NoNxt", 60: "IPv6-Opts", 88: "EIGRP", 89: "OSPF", 94: "IPIP",
    103: "PIM", 112: "VRRP", 115: "L2TP", 132: "SCTP", 136: "UDPLite", 137: "MPLS-in-IP",
}
