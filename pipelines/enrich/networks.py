"""The operator's networks: a CSV prefix file with columns prefix, name, role, site, region,
tenant (only `prefix` is required; missing columns read as empty), IPv4 and IPv6.

Longest prefix match without walking the prefixes: one dict per family keyed by
(prefix length, address >> host bits), probed from the longest length present down;
files hold a handful of distinct lengths, so a lookup is a few dict probes. The caller
caches per address (apply.py), so each distinct address is matched once.
"""
from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

from flowlake.base.operator_files import OperatorFileError, csv_rows

COLUMNS = ("prefix", "name", "role", "site", "region", "tenant")
ATTRS = COLUMNS[1:]
EMPTY = ("",) * len(ATTRS)


class NetworksError(OperatorFileError):
    """The prefix file is unreadable or has a bad line; the message names file and line."""


def parse(path: Path, name: str | None = None) -> list[tuple[str, tuple[str, ...]]]:
    """[(prefix, (name, role, site, region, tenant))] in file order; NetworksError names
    the line of the first problem (bad prefix, host bits set, duplicate, unknown column),
    in `name` (the operator's file when `path` is a copy of it)."""
    shown = name or str(path)
    rows = csv_rows(path, "networks file", NetworksError, name)
    if not rows:
        raise NetworksError(f"{shown}: empty file (expected a header line: {','.join(COLUMNS)})")
    (first, header), rows = rows[0], rows[1:]
    header = [h.strip().lower() for h in header]
    unknown = [h for h in header if h not in COLUMNS]
    if "prefix" not in header or unknown:
        what = f"unknown column(s) {', '.join(map(repr, unknown))}" if unknown else "no 'prefix' column"
        raise NetworksError(f"{shown}:{first}: header: {what} (columns: {','.join(COLUMNS)})")
    pos = {h: i for i, h in enumerate(header)}
    out: list[tuple[str, tuple[str, ...]]] = []
    seen: dict[str, int] = {}
    for line, row in rows:
        if len(row) > len(header):
            raise NetworksError(f"{shown}:{line}: {len(row)} fields, the header has {len(header)}")
        row = row + [""] * (len(header) - len(row))
        raw = row[pos["prefix"]].strip()
        try:
            net = ipaddress.ip_network(raw, strict=True)
        except ValueError as exc:
            raise NetworksError(f"{shown}:{line}: bad prefix {raw!r}: {exc}") from None
        key = str(net)
        if key in seen:
            raise NetworksError(f"{shown}:{line}: prefix {key} already on line {seen[key]}")
        seen[key] = line
        out.append((key, tuple(row[pos[a]].strip() if a in pos else "" for a in ATTRS)))
    return out


def address_int(addr: str) -> tuple[int, int] | None:
    """(family bits 32/128, value) of an address text; None if it is not one."""
    try:
        if ":" in addr:
            return 128, int.from_bytes(socket.inet_pton(socket.AF_INET6, addr), "big")
        return 32, int.from_bytes(socket.inet_pton(socket.AF_INET, addr), "big")
    except OSError:
        return None


class Networks:
    def __init__(self, entries: list[tuple[str, tuple[str, ...]]]):
        self.count = len(entries)
        self.table: dict[int, dict[tuple[int, int], tuple[str, ...]]] = {32: {}, 128: {}}
        lengths: dict[int, set[int]] = {32: set(), 128: set()}
        for prefix, attrs in entries:
            net = ipaddress.ip_network(prefix)
            bits = net.max_prefixlen
            plen = net.prefixlen
            self.table[bits][(plen, int(net.network_address) >> (bits - plen))] = attrs
            lengths[bits].add(plen)
        self.lengths = {bits: sorted(ls, reverse=True) for bits, ls in lengths.items()}

    def lookup(self, addr: str, parsed: tuple[int, int] | None = None) -> tuple[str, ...]:
        """(name, role, site, region, tenant) of the longest prefix holding addr, else EMPTY.
        `parsed`: address_int(addr) when the caller has it."""
        a = parsed or address_int(addr)
        if a is None:
            return EMPTY
        bits, value = a
        table = self.table[bits]
        for plen in self.lengths[bits]:
            hit = table.get((plen, value >> (bits - plen)))
            if hit is not None:
                return hit
        return EMPTY
