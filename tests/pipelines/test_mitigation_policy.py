"""The mitigation's decisions (pipelines/mitigation/policy.py) and the speaker's generated
routes and configuration (collectors/bgp/speaker.py), without a speaker: the safety rules,
the hold-down, max_announcements and the operator's overrides on hand-made attacks."""
from __future__ import annotations

import io
import ipaddress

import pytest
from rich.console import Console

from flowlake.base import config
from flowlake.collectors.bgp import speaker
from flowlake.pipelines.mitigation import policy, service

NOW = 1_800_000_000.0


def rules(**kw) -> policy.Rules:
    base = dict(mode="rtbh", own=policy.parse_nets(["192.0.2.0/24", "2001:db8::/32"], "own"),
                allow=policy.parse_nets(["192.0.2.0/28"], "allow"), max_announcements=2, min_duration_s=30.0,
                hold_down_s=600.0, community="65535:666", next_hop="192.0.2.1", next_hop_v6="100::1")
    base.update(kw)
    return policy.Rules(**base)


def attack(aid, victim, cls="udp", started=NOW - 120, updated=NOW, ended=None, bps=1e9, ports=()):
    return {"id": aid, "victim": victim, "attack_class": cls, "protocol": 17, "src_ports": list(ports),
            "peak_pps": 1.0, "peak_bps": bps, "started": policy.iso(started), "updated": policy.iso(updated),
            "ended": None if ended is None else policy.iso(ended)}


def run(attacks, r=None, overrides=None, routes=None, seen=None, now=NOW, readable=True):
    return policy.plan(attacks, now, r or rules(), overrides or {}, routes or {}, seen or {}, readable)


def test_safety_rules_refuse_outside_and_allow_list():
    p = run([attack("a", "203.0.113.1"), attack("b", "192.0.2.5"), attack("c", "192.0.0.0/16"),
             attack("d", "2001:db9::1"), attack("e", "bogus"), attack("f", "192.0.2.200")])
    assert set(p.wanted) == {"ipv4 192.0.2.200/32"}
    assert "outside the operator's prefixes" in p.status["a"] and "outside" in p.status["c"]
    assert "allow-list ([ddos] allow_list 192.0.2.0/28)" in p.status["b"]
    assert "outside" in p.status["d"] and "not an address" in p.status["e"]
    assert {r[0] for r in p.refused} == {"a", "b", "c", "d", "e"}


def test_min_duration_and_max_announcements_biggest_first():
    p = run([attack("young", "192.0.2.100", started=NOW - 5)] +
            [attack(f"a{i}", f"192.0.2.{50 + i}", bps=1e6 * (i + 1)) for i in range(4)])
    assert p.status["young"] == "waiting: open 5 s of [ddos] min_duration_seconds 30"
    assert set(p.wanted) == {"ipv4 192.0.2.53/32", "ipv4 192.0.2.52/32"}
    assert p.status["a0"].startswith("not announced: [ddos] max_announcements = 2")


def test_in_force_keeps_its_slot_and_hold_down_after_the_end():
    routes = {"ipv4 192.0.2.50/32": {"attack_ids": ["a0"], "origin": "auto"}}
    p = run([attack(f"a{i}", f"192.0.2.{50 + i}", bps=1e6 * (i + 1)) for i in range(4)], routes=routes)
    assert "ipv4 192.0.2.50/32" in p.wanted and len(p.wanted) == 2
    ended = [attack("a0", "192.0.2.50", ended=NOW - 10)]
    p = run(ended, routes=routes)
    assert p.wanted["ipv4 192.0.2.50/32"].hold_until == NOW + 600 and p.ended_seen == {"a0": NOW}
    p = run(ended, routes=routes, seen={"a0": NOW - 601})
    assert not p.wanted and p.status["a0"].startswith("withdrawn (ended")
    # gone from attacks.json: ended when first missed, unless the file is damaged
    entry = {"attack_ids": ["a0"], "origin": "auto", "method": "rtbh", "prefix": "192.0.2.50/32",
             "route": {"family": "ipv4", "key": "192.0.2.50/32", "nlri": ("192.0.2.50/32",), "attrs": ()}}
    p = run([], routes={"ipv4 192.0.2.50/32": entry})
    assert p.wanted["ipv4 192.0.2.50/32"].hold_until == NOW + 600
    p = run([], routes={"ipv4 192.0.2.50/32": entry}, seen={"a0": NOW - 700})
    assert not p.wanted
    p = run([], routes={"ipv4 192.0.2.50/32": entry}, seen={"a0": NOW - 700}, readable=False)
    assert "ipv4 192.0.2.50/32" in p.wanted


def test_operator_overrides_win():
    ov = {"withdraw": [{"target": "a1", "until": None, "user": "ops", "reason": "no"},
                       {"target": "192.0.2.64/30", "until": NOW + 60}, {"target": "192.0.2.70", "until": NOW - 1}],
          "announce": {"x": {"prefix": "192.0.2.99", "method": "rtbh", "at": 1}}}
    p = run([attack("a1", "192.0.2.40"), attack("a2", "192.0.2.65"), attack("a3", "192.0.2.70", bps=1)], overrides=ov)
    assert p.status["a1"] == "withdrawn by the operator (ops: no)" and "operator" in p.status["a2"]
    # the operator's own first; the expired withdraw of .70 no longer holds
    assert list(p.wanted) == ["ipv4 192.0.2.99/32", "ipv4 192.0.2.70/32"]
    ov = {"announce": {"x": {"prefix": "203.0.113.1", "method": "rtbh", "at": 1}}}
    p = run([], overrides=ov)
    assert not p.wanted and "outside" in p.refused[0][2]


@pytest.mark.parametrize("cls,ports,key", [
    ("amplification", [123, 53], "[destination: 192.0.2.99/32][protocol: ==udp][source-port: ==53 ==123]"),
    ("udp", [40000], "[destination: 192.0.2.99/32][protocol: ==udp]"),
    ("syn", [], "[destination: 192.0.2.99/32][protocol: ==tcp][tcp-flags: =S]"),
    ("icmp", [], "[destination: 192.0.2.99/32][protocol: ==icmp]"),
    ("fragments", [], "[destination: 192.0.2.99/32][fragment: is-fragment]"),
    ("total", [], "[destination: 192.0.2.99/32][protocol: ==udp]"),
])
def test_flowspec_rule_per_class(cls, ports, key):
    r = policy.route_for(ipaddress.ip_network("192.0.2.99/32"), "flowspec", rules(mode="flowspec"), cls, 17, ports)
    assert r.key == key and r.family == "ipv4-flowspec" and r.attrs == ("then", "discard")
    v6 = policy.route_for(ipaddress.ip_network("2001:db8::1/128"), "rtbh", rules(), cls, 17, ports)
    assert v6.attrs == ("community", "65535:666", "nexthop", "100::1")


def test_config_errors_name_the_key(tmp_path):
    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_DDOS_MITIGATION": "rtbh",
                           "FLOWLAKE_DDOS_NEIGHBOR": "router1"})
    with pytest.raises(config.ConfigError, match=r"\[ddos\] neighbor = 'router1': expected an IP address"):
        speaker.check(cfg)
    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_DDOS_ALLOW_LIST": "192.0.2.0/33"})
    with pytest.raises(policy.PolicyError, match=r"\[ddos\] allow_list: '192.0.2.0/33'"):
        policy.rules_from_config(cfg)
    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_DDOS_BLACKHOLE_COMMUNITY": "666"})
    with pytest.raises(policy.PolicyError, match="blackhole_community"):
        policy.rules_from_config(cfg)


def test_speaker_config_takes_no_routes_and_does_not_listen(tmp_path):
    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_DDOS_MITIGATION": "rtbh",
                           "FLOWLAKE_DDOS_NEIGHBOR": "192.0.2.254", "FLOWLAKE_DDOS_LOCAL_AS": "64500",
                           "FLOWLAKE_DDOS_PEER_AS": "64501", "FLOWLAKE_DDOS_ROUTER_ID": "192.0.2.253"})
    text = speaker.config_text(speaker.check(cfg))
    assert "port = -1" in text and 'default-import-policy = "reject-route"' in text
    assert 'neighbor-address = "192.0.2.254"' in text and "remote-port = 179" in text
    for fam in speaker.FAMILIES:
        assert f'afi-safi-name = "{fam}"' in text


def test_status_lines_show_session_routes_and_attacks_open():
    st = {"enabled": True, "mode": "rtbh", "running": True, "neighbor": "192.0.2.254", "in_force": 1,
          "max_announcements": 10, "attacks_open": 3,
          "session": {"state": "active", "reason": "BGP session with 192.0.2.254 port 179 is active"},
          "announcements": [{"method": "rtbh", "route": "192.0.2.10/32", "origin": "auto", "attack_ids": ["a1"],
                             "since": "2026-11-28T10:00:00Z", "delivered": False, "failed": "session down"}]}
    out = io.StringIO()
    service.print_status(Console(file=out, width=200), st)
    text = out.getvalue()
    assert "Mitigation (rtbh): BGP session with 192.0.2.254 active; 1 announcements in force (max 10)" in text
    assert "attacks open 3" in text and "rtbh 192.0.2.10/32 (auto, a1" in text and "not delivered: session down" in text


def test_a_carpet_bomb_is_never_blackholed_whole():
    """A prefix victim (the detector's carpet bomb): RTBH would drop every host in it, the
    attacker's goal, so it is refused with the reason; flowspec takes destination + class."""
    bomb = attack("bomb", "192.0.2.128/25", cls="udp")
    p = run([bomb])
    assert p.wanted == {} and "would blackhole its 128 addresses" in p.status["bomb"]
    assert [r[0] for r in p.refused] == ["bomb"]
    p = run([bomb], r=rules(mode="flowspec"))
    assert len(p.wanted) == 1 and "192.0.2.128/25" in next(iter(p.wanted))


def test_a_stale_attacks_json_announces_nothing_new_and_holds_down_from_its_last_update():
    """The detector (alerts service) down: attacks.json stops being rewritten. Past
    stale_after_s nothing new goes up, and what is in force goes hold_down after the file's
    last update, even though the file still says the attack is open (or is damaged)."""
    r = rules(stale_after_s=60.0)
    routes = {"ipv4 192.0.2.50/32": {"attack_ids": ["a0"], "origin": "auto"}}
    both = [attack("a0", "192.0.2.50"), attack("a1", "192.0.2.51")]
    fresh = policy.plan(both, NOW, r, {}, routes, {}, True, NOW - 59)
    assert set(fresh.wanted) == {"ipv4 192.0.2.50/32", "ipv4 192.0.2.51/32"}
    last = NOW - 61
    p = policy.plan(both, NOW, r, {}, routes, {}, True, last)
    assert set(p.wanted) == {"ipv4 192.0.2.50/32"}  # held down, not yet withdrawn
    assert p.wanted["ipv4 192.0.2.50/32"].hold_until == last + 600 and not p.wanted["ipv4 192.0.2.50/32"].open
    assert p.status["a1"].startswith("not announced: attacks.json stale (the detector last wrote it at")
    p = policy.plan(both, last + 600, r, {}, routes, p.ended_seen, True, last)
    assert not p.wanted and p.status["a0"].startswith("withdrawn (attacks.json stale since")
    # an attack that ended before the file went stale keeps its own (earlier) hold-down
    p = policy.plan(both, NOW, r, {}, routes, {"a0": last - 100}, True, last)
    assert p.wanted["ipv4 192.0.2.50/32"].hold_until == last - 100 + 600
    # the detector back, the attack still open: announced again, nothing held down
    p = policy.plan(both, NOW, r, {}, routes, {"a0": last}, True, NOW - 1)
    assert p.wanted["ipv4 192.0.2.50/32"].open and "a0" not in p.ended_seen
    # a damaged file keeps what is in force only until it is stale too
    entry = {"attack_ids": ["a0"], "origin": "auto", "method": "rtbh", "prefix": "192.0.2.50/32",
             "route": {"family": "ipv4", "key": "192.0.2.50/32", "nlri": ("192.0.2.50/32",), "attrs": ()}}
    p = policy.plan([], NOW + 3600, r, {}, {"ipv4 192.0.2.50/32": entry}, {}, False, NOW - 30)
    assert not p.wanted and "unreadable and stale" in p.status["a0"]
    p = policy.plan([], NOW, r, {}, {"ipv4 192.0.2.50/32": entry}, {}, False, NOW - 30)
    assert "ipv4 192.0.2.50/32" in p.wanted


def test_stale_after_default_follows_the_rotation(tmp_path):
    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path)})
    assert cfg.ddos.stale_after_seconds == 0 and policy.stale_after(cfg) == 60.0
    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_COLLECTOR_ROTATE_SECONDS": "300"})
    assert policy.stale_after(cfg) == 1800.0
    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_DDOS_STALE_AFTER_SECONDS": "5"})
    assert policy.rules_from_config(cfg).stale_after_s == 5.0
    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_DDOS_STALE_AFTER_SECONDS": "-1"})
    with pytest.raises(policy.PolicyError, match="stale_after_seconds = -1.0: expected >= 0"):
        policy.rules_from_config(cfg)
    st = {"enabled": True, "mode": "dry-run", "running": True, "attacks_open": 1, "announcements": [],
          "attacks_stale": "state/ddos/attacks.json stale: last written 2026-11-28T10:00:00Z"}
    out = io.StringIO()
    service.print_status(Console(file=out, width=200), st)
    assert "attacks.json stale: last written 2026-11-28T10:00:00Z" in out.getvalue()
