"""The filter's syntax tree: small frozen nodes the compiler turns into Spark columns.

Directionless primitives (`ip`, `port`, `as`, `if`) are expanded to an Or over the
src/dst (in/out) fields at parse time, so the compiler only sees single fields.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

# Numeric fields a comparison can address; derived ones are computed by the compiler.
NUMERIC = ("bytes", "packets", "flows", "duration", "bps", "pps", "bpp", "tos", "src_port", "dst_port",
           "src_as", "dst_as", "input_if", "output_if", "proto", "src_vlan", "dst_vlan",
           # Flow record revision 3 (issue 32); absent (older files, records without the
           # element) reads 0, as nfdump reads a record without the element
           "flow_direction", "src_mask", "dst_mask", "ingress_vrf", "egress_vrf", "forwarding_status",
           "src_port_nat", "dst_port_nat", "nat_event",
           # derived: ICMP type/code (the column, else dst_port's type*256+code), the MPLS
           # stack's Nth label (0 when the stack is shorter) and its bottom label
           "icmp_type", "icmp_code", "mpls_eos", *(f"mpls_label{n}" for n in range(1, 11)))
OPS = ("==", "<", ">", "<=", ">=")


@dataclass(frozen=True)
class Any_:
    pass


@dataclass(frozen=True)
class Not:
    item: object


@dataclass(frozen=True)
class And:
    items: tuple


@dataclass(frozen=True)
class Or:
    items: tuple


@dataclass(frozen=True)
class Cmp:
    field: str
    op: str
    value: int


@dataclass(frozen=True)
class In:
    field: str
    values: tuple


@dataclass(frozen=True)
class Addr:
    """field (src_addr, dst_addr or exporter) lies in any of nets (hosts are /32, /128)."""
    field: str
    nets: tuple  # of ipaddress.IPv4Network / IPv6Network


@dataclass(frozen=True)
class Family:
    version: int  # 4 or 6: both addresses of that family


@dataclass(frozen=True)
class Flags:
    mask: int  # every bit of mask set in tcp_flags


@dataclass(frozen=True)
class Text:
    """field equals one of values (lower-case text, e.g. MAC addresses aa:bb:cc:dd:ee:ff)."""
    field: str
    values: tuple


@dataclass(frozen=True)
class ListHas:
    """the list column field holds value (nfdump's `mpls any N`; `aspath N`, `community A:B`)."""
    field: str
    value: int | str


def either(fields, make) -> object:
    nodes = tuple(make(f) for f in fields)
    return nodes[0] if len(nodes) == 1 else Or(nodes)


def hosts(nets) -> tuple:
    return tuple(ipaddress.ip_network(n) for n in nets)
