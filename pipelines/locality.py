"""Locality: which addresses are the site's own ([site] local_prefixes). The one definition
of the rule that every engine applies (Spark: jobs/common.py add_local_flag; DuckDB:
pipelines/duck.py; Go: jobs/toptalkers/locality.go): an address is local when it lies in
one of the prefixes, IPv4-mapped IPv6 counted as its IPv4 address."""
from __future__ import annotations

import ipaddress
import re


def parse_prefixes(prefixes) -> list:
    nets = []
    for text in prefixes:
        try:
            nets.append(ipaddress.ip_network(str(text).strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"config [site] local_prefixes: {text!r} is not a prefix: {exc}") from None
    return nets


# IPv4 as the engines read it: four dot-separated integers 0-255, each as Spark's cast to
# long reads it (control characters and spaces around it trimmed, an optional sign,
# leading zeros); Go's strconv.ParseInt and DuckDB's TRY_CAST read the same.
_V4_PART = re.compile(r"[+-]?[0-9]+")
# IPv6: hex digits and colons only (no embedded dotted quad but the ::ffff: form, no %zone)
_V6_TEXT = re.compile(r"[0-9a-f:]+")


def _trim_control(text: str) -> str:
    return text.strip("".join(chr(i) for i in range(33)))


def is_local(address_text, nets) -> bool:
    """The reference: is the address text in one of `nets` (parse_prefixes' result)?

    - None or not text: false. The text is trimmed of spaces and lower-cased.
    - ::ffff:a.b.c.d is the IPv4 address a.b.c.d; so is the hex form ::ffff:a01:203
      (Python's ipaddress.ipv4_mapped): IPv4-mapped IPv6 is tested against IPv4 prefixes.
    - Without a colon, IPv4: four dot-separated integers 0-255 (see _V4_PART).
    - With a colon, IPv6 as Python's ipaddress reads it, hex digits and colons only.
    - Anything unparsable is not local.
    Every engine applies this rule in its own code (Spark: jobs/common.py add_local_flag;
    DuckDB: pipelines/duck.py; Go: jobs/toptalkers/locality.go); tests/pipelines/test_locality.py
    runs VECTORS through each and asserts it equals this function."""
    if not isinstance(address_text, str):
        return False
    a = address_text.strip(" ").lower()
    t = a.rsplit(":", 1)[1] if a.startswith("::ffff:") and "." in a else a
    if ":" not in t:
        parts = t.split(".")
        if len(parts) != 4:
            return False
        octets = []
        for p in parts:
            p = _trim_control(p)
            if not _V4_PART.fullmatch(p) or not 0 <= int(p) <= 255:
                return False
            octets.append(int(p))
        ip = ipaddress.IPv4Address(bytes(octets))
    else:
        if not _V6_TEXT.fullmatch(a):
            return False
        try:
            ip = ipaddress.IPv6Address(a)
        except ValueError:
            return False
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
    return any(ip in n for n in nets if n.version == ip.version)


# The shared table of cases: (address text, prefixes, local?, why). tests/pipelines/test_locality.py
# checks is_local against the table, then runs every case through each engine's own code
# (Spark, DuckDB, the Go kernel) and asserts it answers as is_local does.
SITE = ("10.0.0.0/8", "192.0.2.0/24", "198.51.100.0/24", "2001:db8::/32")
VECTORS = [
    ("10.1.2.3", SITE, True, "inside an IPv4 prefix"),
    ("10.0.0.0", SITE, True, "a prefix's first address"),
    ("10.255.255.255", SITE, True, "a prefix's last address"),
    ("11.0.0.0", SITE, False, "just after a prefix"),
    ("9.255.255.255", SITE, False, "just before a prefix"),
    ("192.0.2.77", SITE, True, "a /24"),
    ("192.0.3.1", SITE, False, "beside the /24"),
    ("8.8.8.8", SITE, False, "remote IPv4"),
    ("0.0.0.0", SITE, False, "nfcapd's address for none"),
    ("255.255.255.255", SITE, False, "the top of IPv4"),
    (" 10.1.2.3 ", SITE, True, "spaces around"),
    ("010.001.002.003", SITE, True, "leading zeros: integers as the casts read them"),
    ("+10.1.2.3", SITE, True, "a sign, as the casts read it"),
    ("10.1.2.256", SITE, False, "an octet over 255"),
    ("10.1.2.-1", SITE, False, "a negative octet"),
    ("10.1.2", SITE, False, "three octets"),
    ("10.1.2.3.4", SITE, False, "five octets"),
    ("10..2.3", SITE, False, "an empty octet"),
    ("10.1.2.x", SITE, False, "not a number"),
    ("1e1.1.2.3", SITE, False, "an exponent is not an integer"),
    ("", SITE, False, "empty"),
    (None, SITE, False, "null"),
    ("not an address", SITE, False, "words"),
    ("2001:db8::1", SITE, True, "inside the IPv6 prefix"),
    ("2001:DB8::1", SITE, True, "upper case"),
    ("2001:0db8:0000:0000:0000:0000:0000:0001", SITE, True, "uncompressed, leading zeros"),
    ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", SITE, True, "the prefix's last address"),
    ("2001:db9::1", SITE, False, "just after the IPv6 prefix"),
    ("2001:db7:ffff::", SITE, False, "just before the IPv6 prefix"),
    ("2a00:1450:4001::200e", SITE, False, "remote IPv6"),
    ("::", SITE, False, "the unspecified IPv6 address"),
    ("::1", SITE, False, "IPv6 loopback"),
    (" 2001:db8::1 ", SITE, True, "spaces around IPv6"),
    ("::ffff:10.1.2.3", SITE, True, "IPv4-mapped, dotted: the IPv4 address"),
    ("::FFFF:10.1.2.3", SITE, True, "IPv4-mapped, upper case"),
    ("::ffff:8.8.8.8", SITE, False, "IPv4-mapped remote"),
    ("::ffff:a01:203", SITE, True, "IPv4-mapped in hex (Python's str of ::ffff:10.1.2.3)"),
    ("0:0:0:0:0:ffff:a01:203", SITE, True, "IPv4-mapped in hex, uncompressed"),
    ("::ffff:808:808", SITE, False, "IPv4-mapped in hex, remote"),
    ("::ffff:10.1.2.300", SITE, False, "IPv4-mapped with a bad octet"),
    ("::10.1.2.3", SITE, False, "IPv4-compatible (deprecated): not the IPv4 address"),
    ("2001:db8::10.1.2.3", SITE, False, "an embedded dotted quad is not read"),
    ("2001:db8::1%eth0", SITE, False, "a zone is not read"),
    ("2001:db8::1::2", SITE, False, "two ::"),
    ("2001:db8:1:2:3:4:5:", SITE, False, "a trailing colon"),
    (":2001:db8::1", SITE, False, "a leading colon"),
    ("2001:db8:1:2:3:4:5:6:7", SITE, False, "nine groups"),
    ("2001:db8:1:2:3:4:5", SITE, False, "seven groups without ::"),
    ("2001:db8:1:2:3:4:5::6", SITE, False, "eight groups and ::"),
    ("2001:db8:1:2:3:4:5::", SITE, True, "seven groups and ::"),
    ("2001:db80::1", SITE, False, "a 5-digit-looking group boundary: 2001:db80 is outside"),
    ("2001:0db8a::1", SITE, False, "a group of five digits"),
    ("2001:db8:::1", SITE, False, ":::"),
    ("2001:db8::g", SITE, False, "not hex"),
    ("10.1.2.3", ("10.1.2.3/32",), True, "a /32"),
    ("10.1.2.4", ("10.1.2.3/32",), False, "beside a /32"),
    ("10.1.2.3", ("0.0.0.0/0",), True, "everything IPv4"),
    ("2001:db8::1", ("0.0.0.0/0",), False, "IPv6 is not in an IPv4 prefix"),
    ("::ffff:10.1.2.3", ("::ffff:0:0/96",), False, "an IPv4-mapped prefix: the address is IPv4"),
    ("2001:db8::1", ("::/0",), True, "everything IPv6"),
    ("10.1.2.3", ("::/0",), False, "IPv4 is not in an IPv6 prefix"),
    ("fd12:3456:789a::1", ("fd00::/8",), True, "a prefix within the first group"),
    ("fe12::1", ("fd00::/8",), False, "beside a /8"),
    ("2001:db8:1234:5678::1", ("2001:db8:1234:5600::/56",), True, "a prefix ending inside a group"),
    ("2001:db8:1234:5700::1", ("2001:db8:1234:5600::/56",), False, "beside it"),
    ("2001:db8::1", ("2001:db8::1/128",), True, "a /128"),
    ("10.1.2.3", (), False, "no prefixes"),
    ("2001:db8::1", (), False, "no prefixes, IPv6"),
]
