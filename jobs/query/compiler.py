"""Compile the filter tree to a Spark Column over the lake's flow columns (never SQL text).

Addresses are text in the lake (IPv4 dotted, IPv6 compressed). Host matches compare
canonical text; IPv4 networks compare a text prefix of whole octets plus, for a partial
octet, that one octet as a number; IPv6 networks compare the fully expanded 32-digit hex
string as a range (fixed width, so string order equals numeric order). All plain column
expressions: no Python UDF per row. (Converting every IPv4 address to a number with a
regex split was 3-9x slower per flow in bench/query.py.)
"""
from __future__ import annotations

import ipaddress

from pyspark.sql import Column
from pyspark.sql import functions as F

from . import ast
from .sql import LATER_COLUMNS, NO_EOS_LABEL, ZERO_ADDRESS_COLUMNS, any_zero


def to_column(node) -> Column:
    if isinstance(node, ast.Any_):
        return F.lit(True)
    if isinstance(node, ast.Not):
        if isinstance(node.item, ast.Flags):
            # nfdump evaluates `flags XY` as a chain "TCP and X set" and "TCP and Y set" and
            # `not` inverts each link: not flags XY = not TCP, or TCP with none of X, Y set
            # (hence its documented "flags S and not flags AFRPU" = SYN only). Measured on
            # nfdump 1.7.1: tests/jobs/test_query.py and bench/query.py compare with it.
            return (F.col("proto") != 6) | (F.col("tcp_flags").bitwiseAND(F.lit(node.item.mask)) == F.lit(0))
        return ~to_column(node.item)
    if isinstance(node, ast.And):
        return _fold(node.items, lambda a, b: a & b)
    if isinstance(node, ast.Or):
        return _fold(node.items, lambda a, b: a | b)
    if isinstance(node, ast.Cmp):
        return _compare(metric(node.field), node.op, node.value)
    if isinstance(node, ast.In):
        return F.col(node.field).isin(list(node.values))
    if isinstance(node, ast.Text):  # NULL (absent) matches nothing, as sql.py
        return F.coalesce(F.lower(F.col(node.field)).isin(list(node.values)), F.lit(False))
    if isinstance(node, ast.ListHas):
        return F.coalesce(F.array_contains(F.col(node.field), F.lit(node.value)), F.lit(False))
    if isinstance(node, ast.Flags):  # TCP only, every given flag set
        return (F.col("proto") == 6) & (F.col("tcp_flags").bitwiseAND(F.lit(node.mask)) == F.lit(node.mask))
    if isinstance(node, ast.Family):
        v6 = F.col("src_addr").contains(":") & F.col("dst_addr").contains(":")
        v4 = ~F.col("src_addr").contains(":") & ~F.col("dst_addr").contains(":")
        return v6 if node.version == 6 else v4
    if isinstance(node, ast.Addr):
        cond = address_in(F.col(node.field), node.nets)
        if node.field in ZERO_ADDRESS_COLUMNS and any_zero(node.nets):  # absent: nfdump's 0.0.0.0 / ::
            cond = cond | F.col(node.field).isNull()
        return cond
    raise TypeError(f"cannot compile {node!r}")


def _fold(items, op) -> Column:
    cols = [to_column(i) for i in items]
    out = cols[0]
    for c in cols[1:]:
        out = op(out, c)
    return out


def _compare(col: Column, op: str, value: int) -> Column:
    v = F.lit(value)
    return {"==": col == v, "<": col < v, ">": col > v, "<=": col <= v, ">=": col >= v}[op]


def duration_ms() -> Column:
    return F.unix_millis("time_end") - F.unix_millis("time_start")


def metric(name: str) -> Column:
    """A stored column, or nfdump's derived rates (integer division as nfdump's C code)."""
    if name == "duration":
        return duration_ms()
    if name == "bps":  # 8 * bytes / seconds; 0 for zero-duration flows
        d = duration_ms()
        return F.when(d > 0, F.floor(F.col("bytes") * 8000 / d)).otherwise(F.lit(0))
    if name == "pps":
        d = duration_ms()
        return F.when(d > 0, F.floor(F.col("packets") * 1000 / d)).otherwise(F.lit(0))
    if name == "bpp":
        return F.when(F.col("packets") > 0, F.floor(F.col("bytes") / F.col("packets"))).otherwise(F.lit(0))
    if name == "flows":  # nfdump's flow counter: 1 for every lake row (sql.py)
        return F.lit(1)
    if name in ("icmp_type", "icmp_code"):  # the column, else dst_port's type*256+code, as sql.py
        port = F.col("dst_port")
        return F.coalesce(F.col(name), F.floor(port / 256).cast("int") if name == "icmp_type" else port % 256)
    if name.startswith("mpls_label"):  # the Nth label, 0 when the stack is shorter (sql.py)
        return F.coalesce(F.get(F.col("mpls_labels"), int(name[10:]) - 1), F.lit(0))
    if name == "mpls_eos":  # the bottom label, or nfdump's "none" value (sql.py)
        labels = F.col("mpls_labels")
        return F.when(F.size(labels) > 0, F.get(labels, F.size(labels) - 1)).otherwise(F.lit(NO_EOS_LABEL))
    if name in LATER_COLUMNS:  # NULL (a file from before the column) reads as 0, as in sql.py
        return F.coalesce(F.col(name), F.lit(0))
    return F.col(name)


# ---- addresses ----------------------------------------------------------------------
def ipv6_hex(addr: Column) -> Column:
    """IPv6 text (any valid compression) -> 32 lowercase hex digits; null for IPv4 text.

    '::' stands for as many zero groups as make eight; each group is left-padded to
    four digits. (IPv4-embedded forms like ::ffff:1.2.3.4 are not expanded.)"""
    low = F.lower(addr)
    halves = F.split(low, "::", 2)
    left = F.get(halves, 0)
    right = F.coalesce(F.get(halves, 1), F.lit(""))
    lgroups = F.when(left == "", F.array().cast("array<string>")).otherwise(F.split(left, ":"))
    rgroups = F.when(right == "", F.array().cast("array<string>")).otherwise(F.split(right, ":"))
    missing = F.lit(8) - F.size(lgroups) - F.size(rgroups)
    zeros = F.array_repeat(F.lit("0"), F.greatest(missing, F.lit(0)))
    groups = F.concat(lgroups, zeros, rgroups)
    padded = F.transform(groups, lambda g: F.lpad(g, 4, "0"))
    return F.when(addr.contains(":") & (F.size(groups) == 8), F.array_join(padded, ""))


def ipv4_in_net(col: Column, net) -> Column:
    """Dotted-quad text inside an IPv4 network, by text prefix: whole octets of the prefix
    compare as a string prefix ("10.1."), a partial octet as a number range on that octet
    alone. Much cheaper than converting every address to a number (no regex split)."""
    whole, rest = divmod(net.prefixlen, 8)
    octets = str(net.network_address).split(".")
    if whole == 4:
        return col == F.lit(str(net.network_address))
    if whole == 0 and rest == 0:
        return col.contains(".") & ~col.contains(":")
    cond = col.startswith(".".join(octets[:whole]) + ".") if whole else col.contains(".") & ~col.contains(":")
    if rest:
        lo = int(octets[whole])
        hi = lo + (1 << (8 - rest)) - 1
        octet = F.substring_index(F.substring_index(col, ".", whole + 1), ".", -1).try_cast("int")
        cond = cond & octet.between(lo, hi)
    return cond


def canonical(text: str) -> str:
    return str(ipaddress.ip_address(text))


def address_in(col: Column, nets) -> Column:
    """col lies in any of nets: exact text for hosts, ranges for networks."""
    hosts = [str(n.network_address) for n in nets if n.prefixlen == n.max_prefixlen]
    v4 = [n for n in nets if n.version == 4 and n.prefixlen < 32]
    v6 = [n for n in nets if n.version == 6 and n.prefixlen < 128]
    cond = F.lit(False)
    if hosts:
        # the lake's text is canonical; lower() covers exporters that print upper-case hex
        v6hosts = [h for h in hosts if ":" in h]
        cond = cond | col.isin(hosts) | (F.lower(col).isin(v6hosts) if v6hosts else F.lit(False))
    for n in v4:
        cond = cond | ipv4_in_net(col, n)
    if v6:
        hexa = ipv6_hex(col)
        for n in v6:
            lo = f"{int(n.network_address):032x}"
            hi = f"{int(n.broadcast_address):032x}"
            cond = cond | hexa.between(lo, hi)
    return F.coalesce(cond, F.lit(False))
