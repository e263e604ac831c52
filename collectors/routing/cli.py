"""`flowlake routing status` and `flowlake routing lookup ADDR [--exporter E]`."""
from __future__ import annotations

import json

import click

from flowlake.base import config as _config

from . import service


@click.group()
def routing() -> None:
    """The BMP collector: routers' routing tables (issue 33, [routing])."""


@routing.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status_cmd(as_json: bool) -> None:
    """Routers, BMP sessions, routes per table (IPv4/IPv6 prefixes, paths), memory, last update.

    \b
    Per router (a BMP session, named by its source address): session up or closed, its
    sysName, BGP peers up, prefixes per family, paths (all peers and RIB views), the view
    lookups use (loc-rib > post-policy > pre-policy), the last Route Monitoring message,
    and the last error that reset its session. Resets are counted by reason.
    """
    st = service.status(_config.get())
    if as_json:
        click.echo(json.dumps(st, indent=2, sort_keys=True))
        return
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)

    if not st["enabled"] and not st.get("running"):
        click.echo("routing is off ([routing] enabled = false)")
        return
    service.print_status(Console(), st)
    if st.get("error"):
        raise SystemExit(1)


@routing.command("lookup")
@click.argument("addr")
@click.option("--exporter", default="", help="The exporter whose routing table answers (its BMP session, or "
              "[exporters.\"E\"] bmp_router); default: every router's table.")
@click.option("--next-hop", default="", help="Prefer the path with this next hop (as a flow's next hop would).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def lookup_cmd(addr: str, exporter: str, next_hop: str, as_json: bool) -> None:
    """The route and attributes a flow to ADDR gets now: matched prefix, AS path (neighbour
    first), communities, large communities, next hop, origin AS."""
    cfg = _config.get()
    try:
        results = service.lookup(cfg, addr, exporter=exporter, next_hop=next_hop)
    except service.RoutingUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="ADDR") from None
    if as_json:
        click.echo(json.dumps(results, indent=2))
        return
    if not results:
        click.echo("no router has sent BMP yet")
        return
    for r in results:
        where = f"router {r['router']}" if r["router"] else f"exporter {exporter}: no routing table"
        if not r["prefix"]:
            click.echo(f"{addr}: {where}: no route")
            continue
        click.echo(f"{addr}: {where}: {r['prefix']} via {r['next_hop'] or '-'} ({r.get('rib', '')}"
                   + (f", peer {r['peer']} AS{r['peer_as']}" if r.get("peer") else "") + ")")
        click.echo(f"  AS path      {' '.join(str(a) for a in r['as_path']) or '(empty: the router own AS)'}")
        click.echo(f"  origin AS    {r['origin_as']}")
        click.echo(f"  communities  {' '.join(r['communities']) or '-'}")
        click.echo(f"  large        {' '.join(r['large_communities']) or '-'}")
