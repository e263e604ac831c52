"""The filter's syntax tree: small frozen nodes the compiler turns into Spark columns.

Directionless primitives (`ip`, `port`, `as`, `if`) are expanded to an Or over the
src/dst (in/out) fields at parse time, so the compiler only sees single fields.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

# Numeric fields a comparison can address; derived ones are computed by the compiler.
NUMERIC = ("bytes", "packets", "duration", "bps", "pps", "bpp", "tos", "src_port", "dst_port",
           "src_as", "dst_as", "input_if", "output_if", "proto", "src_vlan", "dst_vlan")
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


def either(fields, make) -> object:
    nodes = tuple(make(f) for f in fields)
    return nodes[0] if len(nodes) == 1 else Or(nodes)


def hosts(nets) -> tuple:
    return tuple(ipaddress.ip_network(n) for n in nets)
