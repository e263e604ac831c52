"""The demo's site: the files and settings `flowlake demo` gives the traffic model's border.

Built at demo time under $FLOWLAKE_HOME/demo/site/, nothing downloaded:
- demo-asn.mmdb, demo-city.mmdb: MaxMind-format databases (GeoLite2-ASN / GeoLite2-City
  layouts, written with mmdb-writer) covering the model's remote address space (every public
  /8 it draws from, 2a00::/16 in /20s) and the site's own prefixes (its country; a real
  GeoLite2 has no private space, a demo site has a home);
- networks.csv: the site's networks (the model draws local hosts from the first /16 of each
  local prefix), the PingER targets' sites and "internet" for the rest;
- pinger_regions.csv: jobs/pinger_regions.example.csv (the model's probe and targets);
- reverse DNS: Debian's dnsmasq on a loopback port ([rdns] server/port), synthesising a
  PTR name for every remote address of the model (--synth-domain, one domain per /8 in its
  country's TLD), started by the demo for its report jobs (`start_dns`);
- flowlake.toml: the embedded defaults plus [exporters] names, interface names, aliases and
  speeds of the modelled routers, [[enrich.interface_rules]] that classify them, the files
  above, [active] interface_speeds, alert settings for a modelled day and a forecast over the
  demo's week of history, and [routing] on (the modelled routers' BMP: demo_routing.py).

Only for a home run on the embedded defaults (no FLOWLAKE_CONFIG, no ./flowlake.toml of the
user's): `flowlake demo` then points FLOWLAKE_CONFIG at this file for itself and the stack
it starts, and prints it.
"""
from __future__ import annotations

import csv
import logging
import shutil
import socket
import subprocess
import time
from pathlib import Path

from flowlake.base import config as _config
from flowlake.base.ports import free_port

# The modelled routers (collectors/traffic/model.default_routers): uplink ifIndex 1, LAN 10-13.
ROUTERS = {
    "127.0.0.2": ("border-a", "Transit: Cogent 1-38349"),
    "127.0.0.3": ("border-b", "IX: AMS-IX peering lan"),
    "127.0.0.4": ("border-c", "Transit: Lumen 3356-77"),
}
LAN = {10: "Campus: core-1", 11: "Campus: physics", 12: "Campus: computing", 13: "Campus: guests"}
UPLINK_IF, UPLINK_MBPS, LAN_MBPS = 1, 10_000, 10_000

INTERFACE_RULES = [
    {"description": r"(?i)^(?P<connectivity>transit|pni|ix):? (?P<provider>\S+)", "boundary": "external"},
    # the site's own side: the LAN an interface serves, as its "provider" (one name per LAN)
    {"description": r"(?i)^campus:? (?P<provider>\S+)", "connectivity": "campus", "boundary": "internal"},
]

COUNTRIES = ("US", "DE", "JP", "GB", "FR", "BR", "NL", "CN", "IN", "CA", "AU", "SE", "IT", "ES", "KR", "ZA")
# first octets the model draws remote IPv4 hosts from (collectors/traffic/model._PUBLIC_FIRST)
PUBLIC_FIRST = [o for o in range(1, 224) if o not in (10, 100, 127, 169, 172, 192, 198, 203)]
SITE_COUNTRY, SITE_CITY, SITE_ASN, SITE_ORG = "US", "Menlo Park", 64496, "flowlake demo site"

# The local /16s the model draws from, split the way an operator would name them.
LOCAL_NETWORKS = [
    ("10.0.0.0/18", "campus-core", "internal", "main", "us-west", "it"),
    ("10.0.64.0/18", "physics", "internal", "main", "us-west", "research"),
    ("10.0.128.0/18", "computing", "internal", "main", "us-west", "research"),
    ("10.0.192.0/18", "guests", "internal", "main", "us-west", "guests"),
    ("192.0.2.0/24", "dmz", "internal", "main", "us-west", "it"),
    ("198.51.100.0/24", "data-transfer", "internal", "main", "us-west", "research"),
    ("2001:db8::/32", "campus-v6", "internal", "main", "us-west", "it"),
]
# The PingER targets' sites (jobs/pinger_regions.example.csv): AS number and country.
COLLABORATORS = {"134.79.0.0/16": (3671, "US"), "131.225.0.0/16": (3152, "US"), "193.62.192.0/21": (786, "GB"),
                 "192.88.7.0/24": (2907, "JP")}
# The PingER targets' sites and everything else.
REMOTE_NETWORKS = [
    ("134.79.0.0/16", "SLAC", "collaborator", "SLAC", "North America", ""),
    ("131.225.0.0/16", "FNAL", "collaborator", "FNAL", "North America", ""),
    ("193.62.192.0/21", "EMBL-EBI", "collaborator", "EMBL-EBI", "Europe", ""),
    ("192.88.7.0/24", "remote collaborator", "collaborator", "remote", "East Asia", ""),
    ("0.0.0.0/0", "internet", "external", "", "", ""),
    ("::/0", "internet", "external", "", "", ""),
]

# Alerts on a modelled day: new talkers only on telnet (no modelled service uses it, only the
# scanners probe it), so the Alerts dashboard shows the scanners and the fan-in burst
# instead of every first ssh client of the day; learnt from the first minutes only.
ALERTS = {"watched_ports": [23], "talkers_learn_minutes": 10.0}
FORECAST_MIN_DAYS = 7  # the demo's week of history (and its day): enough for a trend


def interfaces(addr: str) -> dict[int, tuple[str, str, int]]:
    """A modelled router's interfaces: ifIndex -> (name, description, speed in Mbit/s), as the
    demo's [exporters] tables and its SNMP agents (flowlake/demo_snmp.py) give them."""
    out = {UPLINK_IF: (f"et-0/0/{UPLINK_IF}", ROUTERS[addr][1], UPLINK_MBPS)}
    out.update({i: (f"xe-1/0/{i}", d, LAN_MBPS) for i, d in LAN.items()})
    return out


def _tld(cc: str) -> str:
    return {"US": "com", "GB": "uk"}.get(cc, cc.lower())


def dns_domains() -> list[tuple[str, str]]:
    """(domain, address range) dnsmasq synthesises PTR names in: the model's remote hosts."""
    out = [(f"isp{o}.flowlake-demo.{_tld(COUNTRIES[o % len(COUNTRIES)])}", f"{o}.0.0.0/8") for o in PUBLIC_FIRST]
    out += [(f"v6-{k}.flowlake-demo.{_tld(COUNTRIES[(k * 5) % len(COUNTRIES)])}", f"2a00:{k:x}000::/20")
            for k in range(16)]
    out += [(f"site{k}.flowlake-demo.{_tld(cc)}", prefix) for k, (prefix, (_, cc)) in enumerate(COLLABORATORS.items())]
    return out


def start_dns(cfg) -> subprocess.Popen | None:
    """dnsmasq answering [rdns] port on 127.0.0.1 (the demo's), no upstream; None when the
    demo site's settings are not in use or dnsmasq is missing (names stay unknown)."""
    exe = shutil.which("dnsmasq") or ("/usr/sbin/dnsmasq" if Path("/usr/sbin/dnsmasq").exists() else None)
    if exe is None or cfg.rdns.server != "127.0.0.1" or cfg.source is None or cfg.source.parent != site_dir(cfg):
        return None
    log = cfg.path("log") / "demo-dnsmasq.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [exe, "--keep-in-foreground", "--conf-file=/dev/null", "--no-hosts", "--no-resolv", "--no-poll",
           "--listen-address=127.0.0.1", "--bind-interfaces", f"--port={int(cfg.rdns.port)}", "--pid-file=",
           "--local=/in-addr.arpa/", "--local=/ip6.arpa/", f"--log-facility={log}"]
    cmd += [f"--synth-domain={domain},{net}" for domain, net in dns_domains()]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    if proc.poll() is not None:
        return None
    return proc


def site_dir(cfg) -> Path:
    return cfg.path("demo", "site")


def own_config(cfg) -> Path | None:
    """The user's configuration file, None when the home runs on the embedded defaults."""
    src = cfg.source
    return None if src is None or src == _config.DEFAULTS_FILE else src


def _geo(asn: int, org: str, cc: str, city: str) -> tuple[dict, dict]:
    country = {"iso_code": cc, "names": {"en": cc}, "geoname_id": 1}
    return ({"autonomous_system_number": asn, "autonomous_system_organization": org},
            {"city": {"names": {"en": city}, "geoname_id": 2}, "country": country, "registered_country": country})


def mmdb_networks(local_prefixes) -> dict[str, tuple[dict, dict]]:
    """prefix -> (ASN record, City record): the site's prefixes, each public /8 of the model's
    remote IPv4 hosts, 2a00::/16 (its remote IPv6 hosts) in sixteen /20s."""
    out = {p: _geo(SITE_ASN, SITE_ORG, SITE_COUNTRY, SITE_CITY) for p in local_prefixes}
    for o in PUBLIC_FIRST:
        cc = COUNTRIES[o % len(COUNTRIES)]
        out[f"{o}.0.0.0/8"] = _geo(20000 + o, f"demo transit AS{20000 + o}", cc, f"{cc} city")
    for k in range(16):
        cc = COUNTRIES[(k * 5) % len(COUNTRIES)]
        out[f"2a00:{k:x}000::/20"] = _geo(30000 + k, f"demo v6 AS{30000 + k}", cc, f"{cc} city")
    for prefix, (asn, cc) in COLLABORATORS.items():  # the PingER targets' sites (one outside the /8s above)
        out[prefix] = _geo(asn, f"{prefix} site", cc, f"{cc} city")
    return out


def write_mmdbs(out: Path, local_prefixes) -> tuple[Path, Path]:
    from mmdb_writer import MMDBWriter  # noqa: PLC0415  (start-up: only the demo writes databases)
    from netaddr import IPSet  # noqa: PLC0415  (start-up: mmdb-writer's network type)

    # mmdb-writer logs every network placed inside another at INFO (the PingER sites in their /8)
    logging.getLogger("mmdb_writer").setLevel(logging.WARNING)
    nets = mmdb_networks(local_prefixes)
    paths = []
    for k, layout in enumerate(("GeoLite2-ASN", "GeoLite2-City")):
        w = MMDBWriter(6, layout, description=f"flowlake demo {layout}", ipv4_compatible=True)
        for prefix, recs in nets.items():
            w.insert_network(IPSet([prefix]), recs[k])
        path = out / ("demo-asn.mmdb" if k == 0 else "demo-city.mmdb")
        w.to_db_file(str(path))
        paths.append(path)
    return paths[0], paths[1]


def write_networks(path: Path) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("prefix", "name", "role", "site", "region", "tenant"))
        w.writerows(LOCAL_NETWORKS + REMOTE_NETWORKS)
    return path


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        if "'" not in value and "\n" not in value:
            return "'" + value + "'"  # literal: regexes and paths as written
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def config_text(cfg, files: dict[str, Path]) -> str:
    """The demo's flowlake.toml (merged over the embedded defaults)."""
    lines = ["# Written by `flowlake demo` (flowlake/demo_site.py): the embedded defaults plus the demo site.",
             f"home = {_toml(str(cfg.home_dir))}", ""]
    for addr, (name, _uplink) in ROUTERS.items():
        lines += [f'[exporters."{addr}"]', f"name = {_toml(name)}", ""]
        for idx, (ifname, descr, mbps) in interfaces(addr).items():
            lines += [f'[exporters."{addr}".interfaces.{idx}]', f"name = {_toml(ifname)}",
                      f"description = {_toml(descr)}", f"speed_mbps = {mbps}", ""]
    lines += ["[enrich]", f"asn_database = {_toml(str(files['asn']))}", f"geo_database = {_toml(str(files['geo']))}",
              f"networks = {_toml(str(files['networks']))}", ""]
    for rule in INTERFACE_RULES:
        lines += ["[[enrich.interface_rules]]", *(f"{k} = {_toml(v)}" for k, v in rule.items()), ""]
    speeds = [f"{addr}/{idx}={int(mbps * 1e6)}" for addr in ROUTERS
              for idx, mbps in [(UPLINK_IF, UPLINK_MBPS), *((i, LAN_MBPS) for i in LAN)]]
    lines += ["[active]", f"interface_speeds = {_toml(speeds)}", "",
              "[alerts]", *(f"{k} = {_toml(v)}" for k, v in ALERTS.items()), "",
              "[rollups]", f"forecast_min_days = {FORECAST_MIN_DAYS}", "",
              "[pinger]", f"regions = {_toml(str(files['regions']))}", "",
              # the local dnsmasq answers at once: every remote end of the day within the budget
              # (at the defaults' 200/s, 60 s, the unnamed tail outweighed every named domain)
              "[rdns]", "server = '127.0.0.1'", f"port = {free_port(socket.SOCK_DGRAM)}", "rate = 5000.0",
              "max_lookups = 100000", "",
              # the modelled routers' BMP sessions (flowlake/demo_routing.py): routes on every flow
              "[routing]", "enabled = true", f"bmp_port = {free_port()}", ""]
    return "\n".join(lines)


def prepare(cfg) -> Path:
    """Write the demo site's files and its flowlake.toml; return the toml's path."""
    out = site_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    asn, geo = write_mmdbs(out, list(cfg.site.local_prefixes))
    files = {"asn": asn, "geo": geo, "networks": write_networks(out / "networks.csv"),
             "regions": Path(shutil.copyfile(_config.REPO_ROOT / "jobs" / "pinger_regions.example.csv",
                                             out / "pinger_regions.csv"))}
    path = out / "flowlake.toml"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(config_text(cfg, files))
    _config.load(tmp)  # refuses what the defaults would refuse, before the stack reads it
    tmp.replace(path)
    return path


def params(protocol: str, cfg):
    """The traffic model for the demo: the defaults, every router exporting flow record
    revision 3's elements (forwarding status, MPLS, VRFs, NAT, MACs; v9/IPFIX only)."""
    from flowlake.collectors.traffic import api  # noqa: PLC0415  (start-up: numpy, scipy)

    p = api.params_for(protocol, cfg)
    for r in p.routers:
        r.record3 = protocol != "v5"
    return p


def write_history(cfg, first_day, days: int, flows_per_day: int, seed: int = 1) -> dict:
    """`days` days of the traffic model from first_day, as rollups only (lake/rollups/1m, 5m,
    1h, 1d): the model's flows as the lake would hold them (collectors/traffic/lake_rows,
    volume growing by half from the first day to the last), rolled up by the hour close's own
    SQL (pipelines/rollups.write_days), without the network and the hour close in between: a
    week at 20,000 flows a day costs seconds, where 168 hour closes through the stack cost
    minutes. Growth, the capacity forecast and the rollups' charts then have days before the
    demo's day. Returns rows written per resolution."""
    import datetime as dt  # noqa: PLC0415  (start-up: only the demo writes history)

    import pyarrow as pa  # noqa: PLC0415  (start-up: only the demo writes history)

    from flowlake.collectors.traffic import lake_rows, model  # noqa: PLC0415  (start-up: numpy, scipy)
    from flowlake.pipelines import rollups  # noqa: PLC0415  (start-up: duckdb)

    if days <= 0:
        return {}
    p = model.ModelParams()
    p.local_prefixes = list(cfg.site.local_prefixes)
    first_ms = int(dt.datetime.combine(first_day, dt.time(), dt.UTC).timestamp() * 1000)
    table = pa.concat_tables([lake_rows.lake_table(f, p) for _, f in
                              lake_rows.growing_days(p, first_ms, days, flows_per_day, growth=0.5, seed=seed)])
    con = rollups.connect()
    con.register("demo_history", table)
    return {"flows": table.num_rows, **rollups.write_days(cfg, "demo_history", con)}
