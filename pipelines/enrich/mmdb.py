"""ASN and geography from MaxMind-format (MMDB) databases the operator supplies, read with
`maxminddb` (MaxMind's own reader, C extension).

Layouts understood (field names per record):
- GeoLite2-ASN, DB-IP ASN lite:  autonomous_system_number (int), autonomous_system_organization
- GeoLite2-Country/-City, DB-IP country/city lite: country.iso_code, city.names.en (City only)
- IPinfo lite (ipinfo_lite.mmdb):  asn ("AS15169"), as_name, country_code ("US"), country (the name)
- IPinfo free country_asn (older):  asn, country (the ISO code), country_name
`registered_country` (where the block is registered) is not where the address is: never used.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

KINDS = ("asn", "geo")


class DatabaseError(ValueError):
    """A database file is missing, corrupt or of the wrong kind; the message names it."""


def asn_of(rec) -> int:
    if not isinstance(rec, dict):
        return 0
    n = rec.get("autonomous_system_number")
    if isinstance(n, int):
        return n
    n = rec.get("asn")
    if isinstance(n, int):
        return n
    if isinstance(n, str):
        digits = n[2:] if n[:2].upper() == "AS" else n
        return int(digits) if digits.isdigit() else 0
    return 0


def country_of(rec) -> str:
    if not isinstance(rec, dict):
        return ""
    c = rec.get("country")
    if isinstance(c, dict):
        return str(c.get("iso_code") or "")
    code = rec.get("country_code")
    if isinstance(code, str):
        return code
    if isinstance(c, str) and len(c) == 2 and c.isalpha():  # IPinfo country_asn: the code itself
        return c.upper()
    return ""


def city_of(rec) -> str:
    if not isinstance(rec, dict):
        return ""
    c = rec.get("city")
    if isinstance(c, dict):
        return str((c.get("names") or {}).get("en") or "")
    return c if isinstance(c, str) else ""


@dataclass(frozen=True)
class Info:
    """What status shows of a loaded database."""
    file: str
    database_type: str
    build_date: str
    records: int        # networks with data in the file
    with_value: int     # of those, networks carrying what this kind is for (an ASN / a country)
    has_city: bool

    def as_dict(self) -> dict:
        return dict(vars(self))


def check(path: Path, kind: str, name: str | None = None) -> Info:
    """Open the file and read every record (a corrupt tree or data section fails here, not
    in the ingest); refuse a file without what `kind` needs. Raises DatabaseError naming
    `name` (the operator's file when `path` is a copy of it)."""
    import maxminddb  # noqa: PLC0415  (start-up: maxminddb)

    if kind not in KINDS:
        raise ValueError(kind)
    shown = name or str(path)
    try:
        reader = maxminddb.open_database(str(path), maxminddb.MODE_MMAP_EXT)
    except FileNotFoundError:
        raise DatabaseError(f"{shown}: no such file") from None
    except (maxminddb.InvalidDatabaseError, ValueError, OSError) as exc:
        raise DatabaseError(f"{shown}: not a MaxMind DB file ({exc})".replace(str(path), shown)) from None
    try:
        meta = reader.metadata()
        records = with_value = 0
        has_city = False
        value = asn_of if kind == "asn" else country_of
        try:
            for _net, rec in reader:
                records += 1
                if value(rec):
                    with_value += 1
                if kind == "geo" and not has_city and city_of(rec):
                    has_city = True
        except (maxminddb.InvalidDatabaseError, ValueError, OSError, RuntimeError) as exc:
            raise DatabaseError(f"{shown}: corrupt MaxMind DB after {records} records: {exc}") from None
        if records and not with_value:
            want = ("AS numbers (autonomous_system_number / asn)" if kind == "asn"
                    else "countries (country.iso_code / country_code)")
            raise DatabaseError(f"{shown}: {meta.database_type} holds no {want}: is it the other kind of database?")
        built = dt.datetime.fromtimestamp(meta.build_epoch, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        return Info(shown, str(meta.database_type), built, records, with_value, has_city)
    finally:
        reader.close()


class Lookup:
    """One database opened for lookups by the C extension, memory-mapped (the snapshot file never
    changes; the pure-Python reader took 14 us an ASN lookup here, the extension 0.6 us).

    Records are also kept per network of the database's tree (`get_with_prefix_len`): every
    address of a network has its record, so an address in a network seen before costs a
    few dict probes instead of a tree walk and a record decode (a City record: 1.8 us)."""

    MAX_LENGTHS = 8  # distinct prefix lengths probed per family; networks of further ones are not kept

    def __init__(self, path: str, entries: int = 200_000):
        import maxminddb  # noqa: PLC0415  (start-up: maxminddb)

        self.reader = maxminddb.open_database(path, maxminddb.MODE_MMAP_EXT)
        self.entries = entries
        self.nets: dict[int, dict] = {32: {}, 128: {}}
        self.lengths: dict[int, list[int]] = {32: [], 128: []}

    def get(self, addr: str, parsed: tuple[int, int] | None = None):
        """The record of `addr`; `parsed`: its (family bits, value) (networks.address_int),
        to use and fill the per-network cache."""
        if parsed is not None:
            bits, value = parsed
            nets = self.nets[bits]
            for plen in self.lengths[bits]:
                hit = nets.get((plen, value >> (bits - plen)), _MISS)
                if hit is not _MISS:
                    return hit
        try:
            rec, plen = self.reader.get_with_prefix_len(addr)
        except ValueError:  # not an address (the lake's addresses always are; stay total)
            return None
        if parsed is not None and len(nets) < self.entries:
            lengths = self.lengths[bits]
            if plen not in lengths:
                if len(lengths) >= self.MAX_LENGTHS:
                    return rec
                lengths.append(plen)
                lengths.sort(reverse=True)
            nets[(plen, value >> (bits - plen))] = rec
        return rec

    def close(self) -> None:
        self.reader.close()


_MISS = object()
