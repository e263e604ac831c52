"""Flow enrichment's sources, each against an independent reference: MaxMind-format
databases built here with mmdb-writer in every supported vendor layout, the networks
file's longest prefix match against a brute-force walk with `ipaddress`, the interface
rules, the SNMP cache contract, hot reload and refusal of broken files."""
from __future__ import annotations

import ipaddress
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import mmdb_files  # noqa: E402

from flowlake.base import config as _config  # noqa: E402
from flowlake.pipelines.enrich import apply, classify, interfaces, mmdb, networks, sources  # noqa: E402
from flowlake.schemas import FLOW, FLOWS_TABLE, messages  # noqa: E402
from flowlake.schemas.enrich import ENRICHMENT_NAMES  # noqa: E402

NETS = {  # prefix -> (asn, org, country, city)
    "10.0.0.0/8": (64500, "Ten", "DE", "Berlin"),
    "10.1.0.0/16": (64501, "Ten-one", "FR", "Paris"),
    "192.0.2.0/24": (64502, "Doc", "US", "Menlo Park"),
    "2001:db8::/32": (64503, "Doc6", "CH", "Geneva"),
}


def flows(rows: list[dict]) -> pa.Table:
    base = {"time_start": 1_764_000_000_000, "time_end": 1_764_000_001_000, "exporter": "127.0.0.2",
            "input_if": 0, "output_if": 0, "src_addr": "10.9.9.9", "dst_addr": "192.0.2.5", "src_port": 1,
            "dst_port": 2, "proto": 6, "tcp_flags": 0, "tos": 0, "packets": 1, "bytes": 100, "sampling_rate": 1,
            "src_as": 0, "dst_as": 0, "source_file": "f", "file_seq": 0}
    return pa.Table.from_pylist([{**base, **r} for r in rows], schema=messages.arrow_schema(FLOW))


def enricher(tmp_path, **kw) -> apply.Enricher:
    return apply.Enricher(apply.Plan(key="t", refresh_dir=str(tmp_path / "refresh"), **kw))


# ---- MMDB layouts ------------------------------------------------------------------------
@pytest.mark.parametrize("layout,kind", [
    ("GeoLite2-ASN", "asn"), ("DBIP-ASN-Lite (compat=GeoLite2-ASN)", "asn"), ("ipinfo_lite.mmdb", "asn"),
    ("ipinfo country_asn.mmdb", "asn"),
    ("GeoLite2-Country", "geo"), ("GeoLite2-City", "geo"), ("DBIP-Country-Lite", "geo"), ("DBIP-City-Lite", "geo"),
    ("ipinfo_lite.mmdb", "geo"), ("ipinfo country_asn.mmdb", "geo"),
])
def test_every_vendor_layout_gives_asn_country_and_city(tmp_path, layout, kind):
    db = mmdb_files.write(tmp_path / "db.mmdb", layout, NETS)
    info = mmdb.check(db, kind)
    # networks in the tree: 10.0.0.0/8 around 10.1.0.0/16 is 8 networks, then 3 more
    assert info.database_type == layout and info.records == 8 + 3 == info.with_value
    assert info.has_city == (kind == "geo" and "City" in layout)
    e = enricher(tmp_path, **{f"{kind}_path": str(db)})
    t = apply.enrich_table(flows([
        {"src_addr": "10.1.2.3", "dst_addr": "10.200.0.1"},
        {"src_addr": "2001:db8:5::1", "dst_addr": "198.51.100.1"},   # dst in no network of the file
        {"src_addr": "192.0.2.77", "dst_addr": "::1"},
    ]), e).to_pydict()
    if kind == "asn":
        assert t["src_as"] == [64501, 64503, 64502] and t["dst_as"] == [64500, 0, 0]
        assert t["src_country"] == ["", "", ""]
    else:
        assert t["src_country"] == ["FR", "CH", "US"] and t["dst_country"] == ["DE", "", ""]
        cities = ["Paris", "Geneva", "Menlo Park"] if info.has_city else ["", "", ""]
        assert t["src_city"] == cities and t["src_as"] == [0, 0, 0]


def test_router_as_numbers_win_over_the_database(tmp_path):
    db = mmdb_files.write(tmp_path / "asn.mmdb", "GeoLite2-ASN", NETS)
    t = apply.enrich_table(flows([{"src_as": 3356, "dst_as": 0}, {"src_as": 0, "dst_as": 174}]),
                           enricher(tmp_path, asn_path=str(db))).to_pydict()
    assert t["src_as"] == [3356, 64500] and t["dst_as"] == [64502, 174]


def test_a_corrupt_or_wrong_database_is_refused_with_the_reason(tmp_path):
    good = mmdb_files.write(tmp_path / "asn.mmdb", "GeoLite2-ASN", NETS).read_bytes()
    (tmp_path / "junk.mmdb").write_bytes(b"not a database at all" * 100)
    with pytest.raises(mmdb.DatabaseError, match="junk.mmdb: not a MaxMind DB file"):
        mmdb.check(tmp_path / "junk.mmdb", "asn")
    # the tree intact, the data section overwritten: only reading the records finds it
    cut = bytearray(good)
    meta = cut.rfind(b"\xab\xcd\xefMaxMind.com")
    cut[meta - 200:meta - 20] = b"\xff" * 180
    (tmp_path / "cut.mmdb").write_bytes(bytes(cut))
    with pytest.raises(mmdb.DatabaseError, match="cut.mmdb"):
        mmdb.check(tmp_path / "cut.mmdb", "asn")
    with pytest.raises(mmdb.DatabaseError, match="holds no AS numbers.*other kind"):
        mmdb.check(mmdb_files.write(tmp_path / "c.mmdb", "GeoLite2-Country", NETS), "asn")


# ---- networks ----------------------------------------------------------------------------
def test_networks_longest_prefix_match_equals_a_brute_force_walk(tmp_path):
    rng = random.Random(7)
    lines, seen = ["prefix,name,role,site,region,tenant"], set()
    for i in range(300):
        if rng.random() < 0.6:
            plen = rng.choice([8, 12, 16, 20, 24, 28, 32])
            net = ipaddress.ip_network(f"10.{rng.randrange(4)}.{rng.randrange(4)}.{rng.randrange(256)}/{plen}", strict=False)
        else:
            plen = rng.choice([32, 40, 48, 56, 64, 128])
            net = ipaddress.ip_network(f"2001:db8:{rng.randrange(4):x}:{rng.randrange(4):x}::{rng.randrange(9):x}/{plen}",
                                       strict=False)
        if str(net) in seen:
            continue
        seen.add(str(net))
        lines.append(f"{net},net{i},role{i % 3},site{i % 5},region{i % 2},tenant{i}")
    path = tmp_path / "nets.csv"
    path.write_text("\n".join(lines) + "\n")
    entries = networks.parse(path)
    nets = networks.Networks(entries)
    ref = [(ipaddress.ip_network(p), attrs) for p, attrs in entries]

    def brute(addr: str):
        a = ipaddress.ip_address(addr)
        best = max((n for n in ref if n[0].version == a.version and a in n[0]), key=lambda n: n[0].prefixlen,
                   default=None)
        return best[1] if best else networks.EMPTY

    probes = [f"10.{rng.randrange(4)}.{rng.randrange(4)}.{rng.randrange(256)}" for _ in range(400)]
    probes += [f"2001:db8:{rng.randrange(4):x}:{rng.randrange(4):x}::{rng.randrange(12):x}" for _ in range(400)]
    probes += ["11.0.0.1", "2001:db9::1", "not-an-address"]
    hits = 0
    for p in probes:
        want = brute(p) if p != "not-an-address" else networks.EMPTY
        assert nets.lookup(p) == want, p
        hits += want != networks.EMPTY
    assert hits > 300, "the probes must mostly land in networks"


@pytest.mark.parametrize("text,where", [
    ("prefix,name\n10.0.0.0/8,a\n10.0.0.300/24,b\n", r":3: bad prefix '10.0.0.300/24'"),
    ("prefix,name\n10.0.0.1/8,a\n", r":2: bad prefix '10.0.0.1/8'.*host bits"),
    ("prefix,name\n10.0.0.0/8,a\n\n# comment\n10.0.0.0/8,b\n", r":5: prefix 10.0.0.0/8 already on line 2"),
    ("prefix,nmae\n10.0.0.0/8,a\n", r":1: header: unknown column\(s\) 'nmae'"),
    ("name,site\na,b\n", r":1: header: no 'prefix' column"),
    ("prefix,name\n2001:db8::/32,a,extra\n", r":2: 3 fields, the header has 2"),
])
def test_a_bad_networks_file_is_rejected_naming_the_line(tmp_path, text, where):
    path = tmp_path / "nets.csv"
    path.write_text(text)
    with pytest.raises(networks.NetworksError, match=f"nets.csv{where}"):
        networks.parse(path)


# ---- interface rules ---------------------------------------------------------------------
RULES = [
    {"description": r"(?i)^(?P<connectivity>transit|pni|ix):? (?P<provider>\S+)", "boundary": "external"},
    {"exporter": "^border-", "name": "^et-", "connectivity": "Peering", "provider": "Unknown Peer!"},
    {"boundary": "internal", "connectivity": "core"},
]


def test_rules_classify_as_akvorado_first_setter_wins_and_names_normalised():
    rules = classify.parse_rules(RULES)
    assert classify.classify(rules, "border-1", "et-0/0/1", "Transit: Cogent 1-3834") == ("external", "transit", "cogent")
    assert classify.classify(rules, "border-1", "et-0/0/2", "IX: AMS-IX (LAN 1)") == ("external", "ix", "ams-ix")
    # rule 2 sets connectivity and provider; boundary falls to rule 3
    assert classify.classify(rules, "border-1", "et-0/0/3", "to somewhere") == ("internal", "peering", "unknownpeer")
    assert classify.classify(rules, "core-1", "xe-1", "backbone") == ("internal", "core", "")
    assert classify.classify(rules, "core-1", "", "") == ("", "", ""), "unknown interfaces stay unclassified"


@pytest.mark.parametrize("rules,msg", [
    ([{"description": "Transit: (?P<provider>\\S+"}], r"#1 .*description = .* is not a valid regex"),
    ([{"boundary": "internal"}, {"boundary": "outside"}], r"#2 .*boundary = 'outside': expected external or internal"),
    ([{"descr": "x", "boundary": "internal"}], r"#1 .*unknown key\(s\) descr"),
    ([{"name": "^et-"}], r"#1 .*sets nothing"),
    ([{"name": "(?P<prov>x)", "boundary": "external"}], r"#1 .*named group\(s\) prov set nothing"),
])
def test_a_bad_rule_is_rejected_naming_it(rules, msg):
    with pytest.raises(classify.RuleError, match=msg):
        classify.parse_rules(rules)


# ---- interfaces: SNMP cache contract and static names ---------------------------------------
def write_snmp(home: Path, exporters: dict) -> Path:
    path = home / "state" / "snmp" / "interfaces.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"version": 1, "exporters": exporters}))
    os.replace(tmp, path)
    return path


def snmp_exporter(sys_name: str, ifs: dict) -> dict:
    return {"sys_name": sys_name, "polled": "2026-11-25T04:00:00Z", "error": "",
            "interfaces": {str(k): {"name": n, "description": d, "speed_mbps": s, "oper_status": 1}
                           for k, (n, d, s) in ifs.items()}}


def home_cfg(tmp_path, toml: str = "", **env) -> object:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "flowlake.toml"
    path.write_text(toml)
    return _config.load(path, env={"FLOWLAKE_HOME": str(tmp_path / "home"), **env})


def test_static_names_win_over_snmp_and_unknown_ifindex_asks_for_a_refresh(tmp_path):
    cfg = home_cfg(tmp_path, """
[exporters."2001:db8::1"]
sampling = 100
name = "border-6"
[exporters."2001:db8::1".interfaces.7]
description = "Transit: Telia 42"
""")
    write_snmp(cfg.home_dir, {"2001:db8::1": snmp_exporter("r6.snmp", {7: ("et-7", "old alias", 100000),
                                                                        8: ("et-8", "PNI: Netflix x", 10000)}),
                              "127.0.0.2": snmp_exporter("border-4", {1: ("eth1", "", 1000)})})
    d = interfaces.directory(interfaces.read_snmp(interfaces.snmp_file(cfg)), interfaces.read_static(cfg))
    assert d["2001:db8::1"] == ("border-6", {7: ("et-7", "Transit: Telia 42", 100000),
                                             8: ("et-8", "PNI: Netflix x", 10000)})
    plan = apply.Plan(key="x", directory=d, rules=tuple(RULES), refresh_dir=str(interfaces.refresh_dir(cfg)))
    e = apply.Enricher(plan)
    t = apply.enrich_table(flows([
        {"exporter": "2001:db8::1", "input_if": 7, "output_if": 8},
        {"exporter": "2001:db8::1", "input_if": 9, "output_if": 0},   # 9: nobody knows it
        {"exporter": "127.0.0.2", "input_if": 1, "output_if": 2},     # 2: unknown too
        {"exporter": "127.0.0.9", "input_if": 1, "output_if": 1},     # an exporter nobody knows
    ]), e).to_pydict()
    assert t["exporter_name"] == ["border-6", "border-6", "border-4", ""]
    assert t["in_if_name"] == ["et-7", "", "eth1", ""] and t["in_if_speed"] == [100000, 0, 1000, 0]
    assert t["in_if_description"][0] == "Transit: Telia 42"
    assert (t["in_if_boundary"][0], t["in_if_connectivity"][0], t["in_if_provider"][0]) == ("external", "transit", "telia")
    assert (t["out_if_boundary"][0], t["out_if_connectivity"][0], t["out_if_provider"][0]) == ("external", "pni", "netflix")
    assert t["out_if_name"][1] == "" and t["out_if_boundary"][1] == "", "ifIndex 0: no interface, nothing asked"
    asked = sorted(p.name for p in interfaces.refresh_dir(cfg).iterdir())
    assert asked == ["127.0.0.2", "127.0.0.9", "2001_db8__1"]
    # the poller consumes the requests; within a minute nothing is asked again
    for p in interfaces.refresh_dir(cfg).iterdir():
        p.unlink()
    apply.enrich_table(flows([{"exporter": "2001:db8::1", "input_if": 9}]), e)
    assert not any(interfaces.refresh_dir(cfg).iterdir())
    r = interfaces.RefreshRequests(str(interfaces.refresh_dir(cfg)))
    assert r.ask("2001:db8::1", now=0.0) and not r.ask("2001:db8::1", now=59.0)
    (interfaces.refresh_dir(cfg) / "2001_db8__1").unlink()
    assert r.ask("2001:db8::1", now=61.0)


@pytest.mark.parametrize("toml,msg", [
    ('[exporters."1.2.3.4".interfaces.x]\nname = "a"\n', r'interfaces.x\]: the key must be the ifIndex'),
    ('[exporters."1.2.3.4".interfaces.3]\nspeed = 10\n', r"unknown key\(s\) speed"),
    ('[exporters."1.2.3.4".interfaces.3]\nspeed_mbps = "fast"\n', r"speed_mbps = 'fast': expected a whole number"),
])
def test_bad_static_interface_definitions_are_named(tmp_path, toml, msg):
    with pytest.raises(_config.ConfigError, match=msg):
        interfaces.read_static(home_cfg(tmp_path, toml))


def test_enrichment_off_still_writes_every_column_unknown():
    t = apply.unenriched_table(flows([{"src_as": 5}]))
    assert t.schema.names == [n for n in FLOWS_TABLE.names if n not in ("date", "hour", "run_id")]
    row = t.to_pylist()[0]
    assert row["src_as"] == 5 and all(row[n] in ("", 0) for n in ENRICHMENT_NAMES)


# ---- the driver's sources: hot reload, refusal, restart ------------------------------------------
def test_changed_database_is_picked_up_and_a_corrupt_one_refused_keeping_the_previous(tmp_path):
    db = tmp_path / "asn.mmdb"
    mmdb_files.write(db, "GeoLite2-ASN", NETS)
    cfg = home_cfg(tmp_path, f'[enrich]\nasn_database = "{db}"\n')
    src = sources.Sources(cfg)
    p1 = src.plan()
    assert apply.Enricher(p1).address("10.1.0.1")[0] == 64501
    assert src.plan().key == p1.key, "nothing changed: same plan"

    mmdb_files.write(db, "GeoLite2-ASN", {"10.0.0.0/8": (65001, "New", "", "")})
    p2 = src.plan()
    assert p2.key != p1.key and apply.Enricher(p2).address("10.1.0.1")[0] == 65001
    assert not Path(p1.asn_path).exists(), "the replaced snapshot is removed"

    db.write_bytes(b"\x00garbage" * 64)
    p3 = src.plan()
    assert p3.asn_path == p2.asn_path, "the previous database stays in use"
    st = json.loads(sources.status_file(cfg).read_text())["sources"]["asn"]
    assert "not a MaxMind DB file" in st["error"] and st["info"]["file"] == str(db) and st["info"]["records"] == 1

    # a restart with the file still broken keeps the last good snapshot too
    again = sources.Sources(cfg).plan()
    assert again.asn_path == p2.asn_path and apply.Enricher(again).address("10.1.0.1")[0] == 65001
    # with nothing before it, a broken file stops the start, naming it
    with pytest.raises(_config.ConfigError, match=r"\[enrich\] asn_database: .*asn.mmdb: not a MaxMind DB"):
        sources.Sources(home_cfg(tmp_path / "fresh", f'[enrich]\nasn_database = "{db}"\n'))


def test_snmp_cache_is_reread_when_it_changes(tmp_path):
    cfg = home_cfg(tmp_path)
    src = sources.Sources(cfg)
    assert src.plan().directory == {}
    write_snmp(cfg.home_dir, {"127.0.0.2": snmp_exporter("b1", {3: ("eth3", "x", 10)})})
    p = src.plan()
    assert p.directory == {"127.0.0.2": ("b1", {3: ("eth3", "x", 10)})}
    interfaces.snmp_file(cfg).write_text("{broken")
    assert src.plan().directory == p.directory, "a broken cache file: the previous directory stays"
    st = json.loads(sources.status_file(cfg).read_text())["snmp"]
    assert "not readable JSON" in st["error"]


def test_ingest_refuses_to_start_naming_the_bad_networks_line_or_rule(tmp_path):
    (tmp_path / "nets.csv").write_text("prefix,name\n10.0.0.0/8,campus\n10.0.0.0/33,bad\n")
    for toml, msg in ((f'[enrich]\nnetworks = "{tmp_path / "nets.csv"}"\n', "nets.csv:3: bad prefix '10.0.0.0/33'"),
                      ('[[enrich.interface_rules]]\nname = "(unclosed"\nboundary = "internal"\n',
                       "[[enrich.interface_rules]] #1")):
        (tmp_path / "flowlake.toml").write_text(toml)
        res = subprocess.run([sys.executable, "-m", "flowlake.cli", "ingest", "--once"], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "FLOWLAKE_CONFIG": str(tmp_path / "flowlake.toml"),
                                                          "FLOWLAKE_HOME": str(tmp_path / "home")})
        assert res.returncode != 0 and msg in res.stderr, res.stderr[-2000:]
        assert "Traceback" not in res.stderr


def test_enrich_keys_take_environment_overrides(tmp_path):
    db = mmdb_files.write(tmp_path / "env-asn.mmdb", "GeoLite2-ASN", NETS)
    cfg = home_cfg(tmp_path, "", FLOWLAKE_ENRICH_ASN_DATABASE=str(db), FLOWLAKE_ENRICH_CACHE_ENTRIES="5000")
    plan = sources.Sources(cfg).plan()
    assert plan.cache_entries == 5000 and apply.Enricher(plan).address("192.0.2.1")[0] == 64502
    off = home_cfg(tmp_path / "off", "", FLOWLAKE_ENRICH_ENABLED="false")
    assert sources.Sources(off).plan() is None


@pytest.mark.parametrize("enrich", [False, True])
def test_a_reused_worker_gets_the_enricher_of_this_homes_routing_collector(tmp_path, enrich):
    """A Spark Python worker keeps one Enricher per plan key: two homes whose plans differ only
    in the routing collector's socket (or as_sources) must not share one (the second would look
    routes up in a collector that is gone: its flows would land unrouted)."""
    extra = f"[enrich]\nenabled = {str(enrich).lower()}\n[routing]\nenabled = true\n"
    a = sources.Sources(home_cfg(tmp_path / "a", extra)).plan()
    b = sources.Sources(home_cfg(tmp_path / "b", extra)).plan()
    c = sources.Sources(home_cfg(tmp_path / "a", extra + 'as_sources = ["routing", "flow"]\n')).plan()
    assert a.routing_socket != b.routing_socket
    assert len({a.key, b.key, c.key}) == 3, "the key names the socket and as_sources"
    assert apply.enricher_for(a).routing.socket_path == a.routing_socket
    assert apply.enricher_for(b).routing.socket_path == b.routing_socket
