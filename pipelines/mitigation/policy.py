"""What to announce: the routes wanted now, from the open attacks, the safety rules and the
operator's overrides. Pure functions (no I/O, no clock): the loop (service.py) passes `now`.

Safety rules, applied to every route, automatic or the operator's:
- only inside the operator's own prefixes ([site] local_prefixes, the locality rule's list);
- never a prefix that overlaps [ddos] allow_list (the operator's infrastructure);
- at most [ddos] max_announcements routes at once (the operator's count first);
- an attack is announced once it has lasted [ddos] min_duration_seconds (its own record:
  updated - started), and withdrawn [ddos] hold_down_minutes after it ended (wall clock
  from when the loop first saw it ended, or saw it gone from attacks.json);
- the operator's withdraw of an attack or a prefix wins over any open attack;
- a stale attacks.json (not rewritten for [ddos] stale_after_seconds: the detector is down)
  announces nothing new, and its attacks count as ended when the file was last written:
  what is in force goes hold_down_minutes after that, whatever the file still says.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass, field

from flowlake.collectors.bgp import speaker

AMPLIFICATION = "amplification"
MAX_RULE_PORTS = 8  # source ports in one flowspec rule (the attack's top ones)


class PolicyError(ValueError):
    """A value the rules cannot use (a bad prefix in the config, a bad victim); names it."""


@dataclass(frozen=True)
class Rules:
    mode: str                       # dry-run, rtbh, flowspec
    own: tuple                      # ip_network: [site] local_prefixes
    allow: tuple                    # ip_network: [ddos] allow_list
    max_announcements: int
    min_duration_s: float
    hold_down_s: float
    community: str
    next_hop: str
    next_hop_v6: str
    rate_bytes: float = 0.0
    stale_after_s: float = 60.0     # attacks.json older than this is stale (the detector is down)

    @property
    def method(self) -> str:
        return "flowspec" if self.mode == "flowspec" else "rtbh"


def parse_nets(values, where: str) -> tuple:
    out = []
    for text in values:
        try:
            out.append(ipaddress.ip_network(str(text).strip(), strict=False))
        except ValueError as exc:
            raise PolicyError(f"config {where}: {text!r} is not a prefix ({exc})") from None
    return tuple(out)


def rules_from_config(cfg) -> Rules:
    d = cfg.ddos
    if d.mitigation not in speaker.MODES:
        raise PolicyError(f"config [ddos] mitigation = {d.mitigation!r}: expected one of {', '.join(speaker.MODES)}")
    for key in ("max_announcements", "min_duration_seconds", "hold_down_minutes", "flowspec_rate_bytes",
                "stale_after_seconds"):
        if getattr(d, key) < 0:
            raise PolicyError(f"config [ddos] {key} = {getattr(d, key)}: expected >= 0")
    for key in ("blackhole_next_hop", "blackhole_next_hop_v6"):
        try:
            ipaddress.ip_address(getattr(d, key))
        except ValueError:
            raise PolicyError(f"config [ddos] {key} = {getattr(d, key)!r}: expected an IP address") from None
    try:
        speaker.rtbh("192.0.2.1/32", d.blackhole_community, "192.0.2.1")
    except ValueError as exc:
        raise PolicyError(f"config [ddos] blackhole_community: {exc}") from None
    return Rules(mode=d.mitigation, own=parse_nets(cfg.site.local_prefixes, "[site] local_prefixes"),
                 allow=parse_nets(d.allow_list, "[ddos] allow_list"), max_announcements=int(d.max_announcements),
                 min_duration_s=float(d.min_duration_seconds), hold_down_s=float(d.hold_down_minutes) * 60.0,
                 community=d.blackhole_community, next_hop=d.blackhole_next_hop,
                 next_hop_v6=d.blackhole_next_hop_v6, rate_bytes=float(d.flowspec_rate_bytes),
                 stale_after_s=stale_after(cfg))


def stale_after(cfg) -> float:
    """[ddos] stale_after_seconds; 0 = six nfcapd rotations ([collector] rotate_seconds), at
    least 60 s: the detector rewrites attacks.json after every interval."""
    value = float(cfg.ddos.stale_after_seconds)
    if value > 0:
        return value
    return max(60.0, 6.0 * float(cfg.collector.rotate_seconds))


def victim_network(text) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """The victim's address as a /32 or /128, or its prefix (a carpet bomb's scope)."""
    try:
        return ipaddress.ip_network(str(text).strip(), strict=False)
    except ValueError:
        raise PolicyError(f"victim {text!r}: not an address or prefix") from None


def unsafe(net, rules: Rules) -> str:
    """Why the prefix must never be announced ('' when it may be)."""
    if not any(net.version == own.version and net.subnet_of(own) for own in rules.own):
        shown = ", ".join(str(n) for n in rules.own) or "none"
        return f"{net} is outside the operator's prefixes ([site] local_prefixes: {shown})"
    for allowed in rules.allow:
        if net.version == allowed.version and net.overlaps(allowed):
            return f"{net} overlaps the allow-list ([ddos] allow_list {allowed})"
    return ""


def seconds(value) -> float | None:
    """An ISO-8601 time (or ms since epoch) as epoch seconds; None for null/unreadable."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) / 1000.0
    try:
        t = dt.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def route_for(net, method: str, rules: Rules, attack_class: str = "", protocol=None, src_ports=()) -> speaker.Route:
    """The route that mitigates traffic to `net`: RTBH, or the flowspec rule of the class."""
    if method == "rtbh":
        return speaker.rtbh(str(net), rules.community, rules.next_hop_v6 if net.version == 6 else rules.next_hop)
    cls = (attack_class or "").lower()
    proto = int(protocol) if isinstance(protocol, int) and protocol in speaker.PROTOCOL_NAMES else None
    ports: tuple[int, ...] = ()
    syn = frag = False
    if cls == AMPLIFICATION:
        proto = 17
        ports = tuple(sorted({int(p) for p in (src_ports or [])[:MAX_RULE_PORTS]}))
    elif cls == "udp":
        proto = 17
    elif cls == "syn":
        proto, syn = 6, True
    elif cls == "icmp":
        proto = 58 if net.version == 6 else 1
    elif cls == "fragments":
        proto, frag = None, True
    elif src_ports and proto in (6, 17):  # an operator's rule: the given protocol and ports
        ports = tuple(sorted({int(p) for p in src_ports}))
    return speaker.flowspec(str(net), proto, ports, tcp_syn=syn, fragment=frag, rate_bytes=rules.rate_bytes)


@dataclass
class Want:
    """One route wanted in the speaker."""
    route: speaker.Route
    method: str
    prefix: str
    origin: str                     # auto, operator
    reason: str
    attack_ids: list[str] = field(default_factory=list)
    peak_bps: float = 0.0
    hold_until: float | None = None  # ended attacks: withdrawn at this time (unless `open`)
    open: bool = False               # an attack it mitigates is still open

    @property
    def community(self) -> str | None:
        return self.route.attrs[1] if self.method == "rtbh" else None

    @property
    def next_hop(self) -> str | None:
        return self.route.attrs[3] if self.method == "rtbh" else None


@dataclass
class Plan:
    wanted: dict[str, Want]                       # route.text -> Want
    status: dict[str, str]                        # attack id -> status for the ones not (yet) wanted
    route_of: dict[str, str]                      # attack id -> route.text of the wanted route
    refused: list[tuple[str, str, str]]           # (attack id or 'operator', prefix, reason)
    ended_seen: dict[str, float]


def suppressed(aid: str, net, overrides: dict, now: float) -> dict | None:
    """The operator's withdraw that covers this attack or prefix (None: none in force)."""
    for w in overrides.get("withdraw", []):
        until = w.get("until")
        if until is not None and until <= now:
            continue
        target = str(w.get("target", ""))
        if target == aid:
            return w
        try:
            tnet = ipaddress.ip_network(target, strict=False)
        except ValueError:
            continue
        if tnet.version == net.version and (net.subnet_of(tnet) or tnet.subnet_of(net)):
            return w
    return None


def stale_since(updated: float | None, now: float, rules: Rules) -> float | None:
    """When attacks.json was last written if it is stale now (else None)."""
    if updated is None or now - updated <= rules.stale_after_s:
        return None
    return updated


def plan(attacks: list[dict], now: float, rules: Rules, overrides: dict, routes: dict, ended_seen: dict,
         attacks_readable: bool = True, attacks_updated: float | None = None) -> Plan:
    """The routes wanted now.

    `routes`: the loop's ledger {route.text: {"attack_ids": [...], "origin": ..., ...}} of
    what it announced; `ended_seen`: {attack id: when the loop first saw it ended}.
    `attacks_readable` False (attacks.json damaged): attacks in the ledger are kept as they
    are (no new announcement, no withdraw) until the file reads again, or until it is stale.
    `attacks_updated`: when the detector last wrote attacks.json (wall clock); older than
    rules.stale_after_s, the file is stale: its attacks count as ended at that time (no new
    announcement; those in force held down from then), and so do the kept ones."""
    stale = stale_since(attacks_updated, now, rules)
    seen = dict(ended_seen)
    status: dict[str, str] = {}
    route_of: dict[str, str] = {}
    refused: list[tuple[str, str, str]] = []
    auto: dict[str, Want] = {}
    by_id = {str(a.get("id")): a for a in attacks if a.get("id") is not None}
    announced_ids = {aid for r in routes.values() for aid in r.get("attack_ids", [])}

    for aid, a in by_id.items():
        try:
            net = victim_network(a.get("victim"))
        except PolicyError as exc:
            status[aid] = f"refused: {exc}"
            refused.append((aid, str(a.get("victim")), str(exc)))
            continue
        why = unsafe(net, rules)
        if why:
            status[aid] = f"refused: {why}"
            refused.append((aid, str(net), why))
            continue
        if rules.method == "rtbh" and net.num_addresses > 1:
            # a carpet bomb's victim is a prefix: blackholing it drops every host in it, the
            # attacker's goal; flowspec (destination + class) or an operator's announce instead
            why = (f"rtbh of {net} would blackhole its {net.num_addresses:,} addresses "
                   "(a carpet bomb: use [ddos] mitigation = flowspec, or `flowlake mitigation announce`)")
            status[aid] = f"refused: {why}"
            refused.append((aid, str(net), why))
            continue
        w = suppressed(aid, net, overrides, now)
        if w is not None:
            status[aid] = f"withdrawn by the operator ({w.get('user') or 'operator'}: {w.get('reason') or 'no reason'})"
            continue
        try:
            route = route_for(net, rules.method, rules, str(a.get("attack_class") or ""), a.get("protocol"),
                              a.get("src_ports") or ())
        except ValueError as exc:
            status[aid] = f"refused: {exc}"
            refused.append((aid, str(net), str(exc)))
            continue
        started, updated = seconds(a.get("started")), seconds(a.get("updated"))
        ended = a.get("ended")
        hold_until = None
        if stale is not None:  # the detector is down: nothing new; what is in force is held down from its last word
            if aid not in announced_ids:
                status[aid] = f"not announced: attacks.json stale (the detector last wrote it at {iso(stale)})"
                continue
            seen[aid] = min(seen.get(aid, stale), stale)
            hold_until = seen[aid] + rules.hold_down_s
            if now >= hold_until:
                status[aid] = (f"withdrawn (attacks.json stale since {iso(stale)}; [ddos] hold_down_minutes "
                               f"{rules.hold_down_s / 60:g} over)")
                continue
        elif ended is not None:
            if aid not in announced_ids:
                status[aid] = "not announced (ended)"
                continue
            seen.setdefault(aid, now)
            hold_until = seen[aid] + rules.hold_down_s
            if now >= hold_until:
                status[aid] = f"withdrawn (ended; [ddos] hold_down_minutes {rules.hold_down_s / 60:g} over)"
                continue
        else:
            seen.pop(aid, None)
            duration = (updated or started or 0.0) - (started or 0.0)
            if duration < rules.min_duration_s and aid not in announced_ids:
                status[aid] = (f"waiting: open {duration:.0f} s of [ddos] min_duration_seconds "
                               f"{rules.min_duration_s:g}")
                continue
        reason = (f"{a.get('attack_class') or 'attack'} attack {aid} on {a.get('victim')}: "
                  f"{float(a.get('peak_pps') or 0):,.0f} pkt/s, {float(a.get('peak_bps') or 0) / 1e6:,.1f} Mbit/s peak")
        want = auto.get(route.text)
        if want is None:
            want = auto[route.text] = Want(route, rules.method, str(net), "auto", reason)
        else:
            want.reason += "; " + reason
        want.attack_ids.append(aid)
        want.peak_bps = max(want.peak_bps, float(a.get("peak_bps") or 0))
        if hold_until is not None:
            want.hold_until = hold_until if want.hold_until is None else max(want.hold_until, hold_until)
        else:
            want.open = True
        route_of[aid] = route.text

    # Attacks the loop announced that attacks.json no longer lists: ended when first missed.
    for text, entry in routes.items():
        if entry.get("origin") != "auto":
            continue
        gone = [aid for aid in entry.get("attack_ids", []) if aid not in by_id]
        if not gone:
            continue
        if not attacks_readable and stale is None:
            want = auto.setdefault(text, Want(speaker.Route(**entry["route"]), entry["method"], entry["prefix"],
                                              "auto", entry.get("reason", "")))
            want.attack_ids += [g for g in gone if g not in want.attack_ids]
            for g in gone:
                route_of[g] = text
            continue
        for aid in gone:
            seen.setdefault(aid, now if stale is None else stale)
            hold_until = seen[aid] + rules.hold_down_s
            if now >= hold_until:
                status[aid] = ("withdrawn (no longer in attacks.json; hold-down over)" if attacks_readable else
                               f"withdrawn (attacks.json unreadable and stale since {iso(stale)}; hold-down over)")
                continue
            want = auto.setdefault(text, Want(speaker.Route(**entry["route"]), entry["method"], entry["prefix"],
                                              "auto", entry.get("reason", "")))
            if aid not in want.attack_ids:
                want.attack_ids.append(aid)
            want.hold_until = max(want.hold_until or 0.0, hold_until)
            route_of[aid] = text
    # an attack whose hold-down is over stays out of `seen` once it left the file
    seen = {aid: t for aid, t in seen.items() if aid in by_id or aid in route_of}

    wanted: dict[str, Want] = {}
    for o in sorted(overrides.get("announce", {}).values(), key=lambda o: o.get("at", 0)):
        try:
            net = victim_network(o.get("prefix"))
            why = unsafe(net, rules)
            route = None if why else route_for(net, o.get("method") or rules.method, rules, "", o.get("protocol"),
                                               o.get("src_ports") or ())
        except (PolicyError, ValueError) as exc:
            why, route = str(exc), None
        if route is None:
            refused.append(("operator", str(o.get("prefix")), why))
            continue
        wanted[route.text] = Want(route, o.get("method") or rules.method, str(net), "operator",
                                  f"operator {o.get('user') or '?'}: {o.get('reason') or 'no reason'}")

    # max_announcements: the operator's first, then what is in force, then the biggest attacks
    def order(item):
        text, w = item
        return (0 if text in routes else 1, -w.peak_bps, text)

    for text, want in sorted(auto.items(), key=order):
        if text in wanted:  # the operator announces the same route: theirs, with the attacks noted
            wanted[text].attack_ids += want.attack_ids
            continue
        if len(wanted) >= rules.max_announcements:
            for aid in want.attack_ids:
                status[aid] = f"not announced: [ddos] max_announcements = {rules.max_announcements} in force"
                route_of.pop(aid, None)
            continue
        wanted[text] = want
    return Plan(wanted, status, route_of, refused, seen)
