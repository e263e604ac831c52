"""`flowlake mitigation list|announce|withdraw|release|serve`: the operator's view of and
hand on the BGP mitigation. The operator's announce and withdraw always win over the
automatic ones (policy.py); each is recorded in lake/mitigations/ (operator-announce,
operator-withdraw) and carried out by the loop within a second."""
from __future__ import annotations

import ipaddress
import json
import time

import click

from flowlake.base import config as _config

from . import policy, store

PROTOCOLS = {"icmp": 1, "tcp": 6, "udp": 17, "ipv6-icmp": 58}


@click.group()
def mitigation() -> None:
    """BGP mitigation of attacks: RTBH or flowspec through flowlake's speaker (gobgpd).

    \b
    The loop (started by `flowlake up` with [ddos] enabled and mitigation not off) reads the
    detector's attacks (state/ddos/attacks.json), applies the safety rules ([ddos] allow_list,
    the operator's prefixes [site] local_prefixes, max_announcements, min_duration_seconds,
    hold_down_minutes) and announces or withdraws; [ddos] mitigation = dry-run (the default)
    only records what it would announce. docs/guide/mitigation.md says how to turn it on.

    \b
    Examples:
      flowlake mitigation list                      routes in force, the operator's overrides
      flowlake mitigation list --events 20 --json   the last 20 recorded events too
      flowlake mitigation announce 192.0.2.10 --reason "ticket 4711"
      flowlake mitigation announce 192.0.2.10 --method flowspec --protocol udp --src-port 123
      flowlake mitigation withdraw 3fa2c1d09b7e     an attack id: never announced again for it
      flowlake mitigation withdraw 192.0.2.10 --minutes 30
      flowlake mitigation release 192.0.2.10        the automatic mitigation may announce it again
    """


def _record(cfg, rows: list[dict]) -> None:
    try:
        store.EventStore.from_config(cfg).append(rows)
    except Exception as exc:  # noqa: BLE001  (the override stands; the loop records what it does)
        click.echo(f"warning: lake/mitigations/ not written: {exc}", err=True)


def _prefix(target: str):
    try:
        return policy.victim_network(target)
    except policy.PolicyError:
        raise click.BadParameter(f"{target!r}: expected an address or a prefix", param_hint="TARGET") from None


@mitigation.command("list")
@click.option("--events", "n_events", type=int, default=0, help="Also the last N events of lake/mitigations/.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: status, overrides, events.")
def list_cmd(n_events: int, as_json: bool) -> None:
    """Routes in force (or that dry-run would announce), per attack its mitigation status,
    the operator's overrides, and optionally the recorded events."""
    cfg = _config.get()
    st = store.read_status(cfg)
    ov = store.read_overrides(cfg)
    events = store.EventStore.from_config(cfg).read(n_events) if n_events else []
    if as_json:
        click.echo(json.dumps({"mode": cfg.ddos.mitigation, "status": st, "overrides": ov, "events": events},
                              indent=2, default=str))
        return
    click.echo(f"mode {cfg.ddos.mitigation}; neighbor {cfg.ddos.neighbor or '-'}; "
               f"session {(st.get('session') or {}).get('state', 'unknown')}; status of {st.get('updated', 'never')}")
    anns = st.get("announcements") or []
    click.echo(f"routes ({len(anns)}):" if anns else "routes: none")
    for a in anns:
        state = "delivered" if a["delivered"] else ("dry-run" if st.get("mode") == "dry-run" else
                                                    f"NOT delivered: {a['failed']}")
        ids = ",".join(a["attack_ids"])
        click.echo(f"  {a['method']:8} {a['route']}  {a['origin']} {ids} since {a['since']}: {state}")
    for aid, s in sorted((st.get("by_attack") or {}).items()):
        click.echo(f"  attack {aid}: {s}")
    for o in ov["announce"].values():
        click.echo(f"  operator announce {o['prefix']} ({o.get('method')}) by {o.get('user')}: {o.get('reason')}")
    for w in ov["withdraw"]:
        until = "until released" if w.get("until") is None else f"until {policy.iso(w['until'])}"
        click.echo(f"  operator withdraw {w['target']} {until} by {w.get('user')}: {w.get('reason')}")
    for e in events:
        click.echo(f"  {policy.iso(e['time'] / 1000)} {e['action']:17} {e['method']:8} {e['route'] or e['prefix']} "
                   f"[{e['origin']}] {e['reason']}")


@mitigation.command()
@click.argument("target")
@click.option("--method", type=click.Choice(["rtbh", "flowspec"]), default=None,
              help="Default: [ddos] mitigation (rtbh in dry-run).")
@click.option("--protocol", type=click.Choice(sorted(PROTOCOLS)), default=None, help="flowspec: match this protocol.")
@click.option("--src-port", "src_ports", type=click.IntRange(0, 65535), multiple=True,
              help="flowspec (tcp/udp): match these source ports (repeat).")
@click.option("--reason", default="", help="Recorded with the announcement.")
def announce(target: str, method: str | None, protocol: str | None, src_ports: tuple[int, ...], reason: str) -> None:
    """Announce TARGET (an address or prefix of the operator's) until withdrawn. The safety
    rules hold for the operator too: never outside [site] local_prefixes nor in the allow-list;
    at most [ddos] max_announcements of the operator's at once."""
    cfg = _config.get()
    rules = policy.rules_from_config(cfg)
    net = _prefix(target)
    why = policy.unsafe(net, rules)
    if why:
        raise click.ClickException(f"refused: {why}")
    method = method or rules.method
    proto = PROTOCOLS.get(protocol) if protocol else None
    if (proto == 58 and net.version == 4) or (proto == 1 and net.version == 6):
        raise click.BadParameter(f"{protocol} does not match an IPv{net.version} destination", param_hint="--protocol")
    if src_ports and proto not in (6, 17):
        raise click.BadParameter("--src-port needs --protocol tcp or udp", param_hint="--src-port")
    route = policy.route_for(net, method, rules, "", proto, src_ports)
    ov = store.read_overrides(cfg)
    if route.text not in ov["announce"] and len(ov["announce"]) >= rules.max_announcements:
        raise click.ClickException(f"refused: the operator already has {len(ov['announce'])} announcements "
                                   f"([ddos] max_announcements = {rules.max_announcements}); withdraw one first")
    now = time.time()
    who = store.user()
    ov["announce"][route.text] = {"prefix": str(net), "method": method, "protocol": proto, "src_ports": list(src_ports),
                                  "reason": reason, "user": who, "at": now}
    ov["withdraw"] = [w for w in ov["withdraw"] if not _covers(w["target"], net)]
    store.write_overrides(cfg, ov)
    _record(cfg, [store.event("operator-announce", method, str(net), route.key, reason or "no reason",
                              origin="operator", neighbor=cfg.ddos.neighbor, who=who, at=now)])
    mode = cfg.ddos.mitigation
    sent = mode in ("rtbh", "flowspec")
    click.echo(f"{method} {route.key}: " + ("announced within a second by the mitigation loop" if sent
                                            else f"recorded; [ddos] mitigation = {mode}: nothing is sent"))


def _covers(target: str, net) -> bool:
    try:
        t = ipaddress.ip_network(target, strict=False)
    except ValueError:
        return False
    return t.version == net.version and (net.subnet_of(t) or t.subnet_of(net))


@mitigation.command()
@click.argument("target")
@click.option("--minutes", type=click.FloatRange(min=0), default=0.0,
              help="Keep the automatic mitigation off TARGET this long (0: until `release` or `announce`).")
@click.option("--reason", default="", help="Recorded with the withdraw.")
def withdraw(target: str, minutes: float, reason: str) -> None:
    """Withdraw TARGET (an attack id, an address or a prefix) now and keep it withdrawn: the
    operator's withdraw wins over an open attack. The operator's own announcements of it go too."""
    cfg = _config.get()
    now = time.time()
    who = store.user()
    ov = store.read_overrides(cfg)
    try:
        net = policy.victim_network(target) if any(c in target for c in ".:/") else None
    except policy.PolicyError:
        net = None
    if net is not None:
        target = str(net)
        ov["announce"] = {k: o for k, o in ov["announce"].items() if not _covers(o["prefix"], net)}
    elif not target.isalnum():
        raise click.BadParameter(f"{target!r}: expected an attack id, an address or a prefix", param_hint="TARGET")
    ov["withdraw"] = [w for w in ov["withdraw"]
                      if w["target"] != target and (w.get("until") is None or w["until"] > now)]
    ov["withdraw"].append({"target": target, "until": now + minutes * 60 if minutes else None, "reason": reason,
                           "user": who, "at": now})
    store.write_overrides(cfg, ov)
    _record(cfg, [store.event("operator-withdraw", cfg.ddos.mitigation if cfg.ddos.mitigation in ("rtbh", "flowspec")
                              else "rtbh", str(net) if net else "", "", reason or "no reason",
                              attack_ids=[] if net else [target], origin="operator", neighbor=cfg.ddos.neighbor,
                              who=who, at=now)])
    click.echo(f"{target}: withdrawn " + (f"for {minutes:g} min" if minutes else "until `flowlake mitigation release`"))


@mitigation.command()
@click.argument("target")
def release(target: str) -> None:
    """End the operator's withdraw of TARGET: the automatic mitigation may announce it again."""
    cfg = _config.get()
    ov = store.read_overrides(cfg)
    try:
        key = str(policy.victim_network(target)) if any(c in target for c in ".:/") else target
    except policy.PolicyError:
        key = target
    left = [w for w in ov["withdraw"] if w["target"] != key]
    if len(left) == len(ov["withdraw"]):
        raise click.ClickException(f"no operator withdraw of {target!r} in force (`flowlake mitigation list`)")
    ov["withdraw"] = left
    store.write_overrides(cfg, ov)
    click.echo(f"{key}: released")


@mitigation.command(hidden=True)
@click.option("--once", is_flag=True, help="One round, then exit.")
def serve(once: bool) -> None:
    """Run the mitigation loop (what `flowlake up` starts)."""
    from .service import serve as run  # noqa: PLC0415  (start-up: the loop's imports only when it runs)

    try:
        run(_config.get(), once=once)
    except policy.PolicyError as exc:
        raise _config.ConfigError(str(exc)) from None
