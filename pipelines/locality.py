"""Locality: which addresses are the site's own ([site] local_prefixes). The one definition
of the rule that every engine applies (Spark: jobs/common.py add_local_flag; DuckDB:
pipelines/duck.py; Go: jobs/toptalkers/locality.go): an address is local when it lies in
one of the prefixes, IPv4-mapped IPv6 counted as its IPv4 address."""
from __future__ import annotations

import ipaddress


def parse_prefixes(prefixes) -> list:
    nets = []
    for text in prefixes:
        try:
            nets.append(ipaddress.ip_network(str(text).strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"config [site] local_prefixes: {text!r} is not a prefix: {exc}") from None
    return nets
