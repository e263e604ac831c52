"""MaxMind-format databases for tests and benches, written with mmdb-writer in the layouts
of the real files (nothing downloaded). IPv6 trees with IPv4 under ::/96
(`ipv4_compatible=True`), as GeoLite2 ships them.

`networks` maps a prefix to (asn, as organisation, country code, city); each layout writes
the fields its vendor does."""
from __future__ import annotations

from pathlib import Path


def _country(code: str) -> dict:
    return {"iso_code": code, "names": {"en": f"country {code}"}, "geoname_id": 1}


LAYOUTS = {
    # GeoLite2-ASN and DB-IP's ASN lite
    "GeoLite2-ASN": lambda asn, org, cc, city: {"autonomous_system_number": asn,
                                                 "autonomous_system_organization": org},
    "DBIP-ASN-Lite (compat=GeoLite2-ASN)": lambda asn, org, cc, city: {"autonomous_system_number": asn,
                                                                        "autonomous_system_organization": org},
    "GeoLite2-Country": lambda asn, org, cc, city: {"country": _country(cc), "continent": {"code": "EU"},
                                                     "registered_country": _country("ZZ")},
    "GeoLite2-City": lambda asn, org, cc, city: {"city": {"names": {"en": city}, "geoname_id": 2},
                                                  "country": _country(cc), "location": {"latitude": 1.5},
                                                  "registered_country": _country("ZZ")},
    "DBIP-Country-Lite": lambda asn, org, cc, city: {"country": _country(cc), "continent": {"code": "EU"}},
    "DBIP-City-Lite": lambda asn, org, cc, city: {"city": {"names": {"en": city}}, "country": _country(cc),
                                                   "subdivisions": [{"names": {"en": "region"}}]},
    # IPinfo lite: flat, one file with both ASN and country ("country" is the name)
    "ipinfo_lite.mmdb": lambda asn, org, cc, city: {"asn": f"AS{asn}", "as_name": org, "as_domain": "example.net",
                                                     "country_code": cc, "country": f"country {cc}",
                                                     "continent_code": "EU", "continent": "Europe"},
    # IPinfo's older free country_asn: "country" is the code
    "ipinfo country_asn.mmdb": lambda asn, org, cc, city: {"asn": f"AS{asn}", "as_name": org, "country": cc,
                                                            "country_name": f"country {cc}"},
}


def write(path: Path, layout: str, networks: dict[str, tuple[int, str, str, str]]) -> Path:
    from mmdb_writer import MMDBWriter
    from netaddr import IPSet

    w = MMDBWriter(6, layout, description=f"flowlake test {layout}", ipv4_compatible=True)
    for prefix, values in networks.items():
        w.insert_network(IPSet([prefix]), LAYOUTS[layout](*values))
    w.to_db_file(str(path))
    return Path(path)
