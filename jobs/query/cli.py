"""`flowlake query` and `flowlake host`: nfdump-style investigation over the lake."""
from __future__ import annotations

import json

import click

from flowlake.base.quick_exit import quick_exit
from flowlake.jobs import anonymise, count_rule

ENGINE_HELP = ("Engine for this command: local (DuckDB in this process), spark, or auto "
               "(default: config [query] engine, FLOWLAKE_QUERY_ENGINE).")
COUNT_AT_HELP = ("Count each flow once (issue 34): boundary (where it crosses the site's external interfaces), key "
                 "(observations matched by addresses, ports, protocol and time), auto (boundary where interfaces "
                 "are classified, key for the rest) or all (every observation, as nfdump sums them). "
                 "Default: config [query] count_at (all; site = as [site] count_at). The rule used is named on stderr.")
PROGRESS_HELP = "Progress of long scans on stderr (default: config [query] progress, auto = on a terminal)."


def _time(ctx, param, value):
    if value is None:
        return None
    from .lake import TimeError, parse_time

    try:
        return parse_time(value)
    except TimeError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def _as_of(ctx, param, value):
    if value is None:
        return None
    from .lake import TimeError, parse_as_of

    try:
        return parse_as_of(value)
    except TimeError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


AS_OF_HELP = ("Read lake/flows as it was: a table VERSION (integer), or a TIME (UTC, or ISO 8601 with Z/offset): "
              "the newest version committed at or before it. lake/flows must be a Delta table.")


def _open(start, end, engine, master, progress, as_of=None, count_at=None, say_rule=False):
    from flowlake.base import config
    from flowlake.base.delta import AsOfError
    from flowlake.jobs.count_rule import CountRuleError

    from . import engines

    if start and end and end <= start:
        raise click.BadParameter(f"--to {end:%Y-%m-%dT%H:%M:%S} is not after --from {start:%Y-%m-%dT%H:%M:%S}")
    cfg = config.get()
    try:
        eng = engines.open_engine(cfg, start, end, engine, master, engines.show_progress(cfg, progress), as_of=as_of,
                                  count_at=count_at)
    except CountRuleError as exc:  # [site] count_at in the config (--count-at is a click.Choice)
        raise click.ClickException(str(exc)) from None
    except AsOfError as exc:
        raise click.BadParameter(str(exc), param_hint="--as-of") from None
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--engine/--progress") from None
    engines.say_version(eng, as_of)
    if say_rule:
        engines.say_rule(eng, count_at)
    return eng


def _engine_options(f):
    f = click.option("--progress/--no-progress", default=None, help=PROGRESS_HELP)(f)
    f = click.option("--master", default=None, help="Spark master (implies the Spark engine; default: config [spark] master).")(f)
    f = click.option("--as-of", "as_of", metavar="VERSION|TIME", callback=_as_of, help=AS_OF_HELP)(f)
    return click.option("--engine", type=click.Choice(["auto", "local", "spark"]), default=None, help=ENGINE_HELP)(f)


@click.command("query", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("filter_text", metavar="FILTER", required=False, default="any")
@click.option("--from", "start", callback=_time, help="First time to read (UTC), e.g. 2026-11-25T10:00.")
@click.option("--to", "end", callback=_time, help="Read flows starting before this time (UTC).")
@click.option("-s", "--stats", "stats", multiple=True, metavar="KEY[/ORDER]",
              help="Top-N statistic like nfdump -s (repeatable): srcip, dstip, ip, srcport, dstport, port, "
                   "proto, srcas, dstas, as, inif, outif, if, router, tos, record; "
                   "orders flows, packets, bytes, pps, bps, bpp.")
@click.option("-n", "top_n", type=click.IntRange(min=0), default=10, show_default=True,
              help="How many rows of each statistic (0: all).")
@click.option("-A", "--aggregate", "aggregate_keys", metavar="KEYS",
              help="Aggregate like nfdump -A, e.g. srcip,dstport.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--limit", type=click.IntRange(min=0), default=None,
              help="Most records to print (0: no limit). Default 20 for table, none for csv/json.")
@click.option("--count-at", "count_at", type=click.Choice(list(count_rule.RULES)), default=None, help=COUNT_AT_HELP)
@_engine_options
@anonymise.query_options
def query(filter_text, start, end, stats, top_n, aggregate_keys, fmt, limit, count_at, engine, master, progress,
          as_of, anon):
    """Search the flow lake with nfdump's filter syntax.

    DuckDB answers inside the command (a day of flows in well under a second); Spark
    when the config or --engine says so (a lake on a cluster). Same rows either way.
    `flowlake query-index` (after hours close) makes the DuckDB answers faster still.

    FILTER is an nfdump 1.7 filter (quote it for the shell). Supported primitives:
    [src|dst] ip|host ADDR, [src|dst] net PREFIX/LEN or net ADDR MASK,
    [src|dst] ip in [ADDR, NET ...], [src|dst] port [COMP] N, [src|dst] port in [N ...],
    proto tcp|udp|icmp|icmp6|N, flags SAFRPU (all set; `not flags` = none set),
    [src|dst] as [COMP] N, as in [...], [in|out] if N, [src|dst] vlan N, router ip ADDR,
    [dst] aspath N, community A:B or A:B:C (flowlake's routing extensions),
    bytes|packets|duration|bps|pps|bpp|tos [COMP] N (K/M/G = 1000-based; duration in ms),
    ipv4|ipv6, any; combined with and/&&, or/||, not/!, parentheses.
    COMP is one of = == < > <= >= eq lt gt le ge.

    \b
    Examples:
      flowlake query 'proto tcp and dst port 22 and flags S and not flags A' --stats srcip/flows
      flowlake query 'src net 10.0.0.0/8 and bytes > 1M' --from 2026-11-25 --to 2026-11-26
      flowlake query 'ip in [192.0.2.10 2001:db8::/32]' --format json --limit 0 > flows.json
      flowlake query 'proto udp' -A srcip,dstport --format csv
      flowlake query 'src vlan 210 and proto tcp' -s dstip/bytes
      flowlake query any -s dstport/bytes -s srcip/packets -n 20
      flowlake query 'proto tcp and dst port 443' -s srcip/bytes --engine spark
      flowlake query 'dst port 22' -s srcip/flows --as-of 2026-11-27T14:00   # the lake as it was then
      flowlake query any -s srcip/bytes --count-at all   # every router's observation, as nfdump sums them
    """
    from .answer import answer, prepare
    from .parser import FilterError
    from .spec import StatError

    try:
        tree, stat_specs, agg = prepare(filter_text, stats, aggregate_keys)
    except FilterError as exc:
        raise click.BadParameter("\n" + str(exc), param_hint="FILTER") from None
    except StatError as exc:
        raise click.BadParameter(str(exc), param_hint="--stats/--aggregate") from None

    if limit is None:
        limit = 20 if fmt == "table" else 0
    eng = _open(start, end, engine, master, progress, as_of, count_at, say_rule=True)
    try:
        answer(eng, tree, stat_specs, top_n, agg, fmt, limit, anon)
    except RuntimeError as exc:  # duck.LakeReadError: a file unreadable or replaced while read
        raise click.ClickException(str(exc)) from None
    finally:
        eng.close()
    if eng.name == "local":  # Spark's session ends its own way
        quick_exit()


@click.command("host", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("address")
@click.option("--from", "start", callback=_time, help="First time to read (UTC).")
@click.option("--to", "end", callback=_time, help="Read flows starting before this time (UTC).")
@click.option("-n", "top_n", type=click.IntRange(min=1), default=10, show_default=True, help="Peers and ports to list.")
@click.option("--nat-rows", type=click.IntRange(min=0), default=50, show_default=True,
              help="NAT translations to list, earliest first (0: count them only).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@_engine_options
def host(address, start, end, top_n, nat_rows, fmt, engine, master, progress, as_of):
    """Profile one host: peers, ports, volume by hour, first and last seen, NAT translations.

    NAT translations (flows exported by a NAT device, NSEL/NEL or IPFIX postNAT elements):
    every inside <-> outside address and port pair where ADDRESS is the inside or the
    outside address, with the NAT event, first and last seen and flows, in the window of
    --from/--to. The outside address of a public IP answers "who was behind it at 14:02".

    \b
    Examples:
      flowlake host 198.51.100.66
      flowlake host 2001:db8::1 --from 2026-11-25 --to 2026-11-26 --format json
      flowlake host 203.0.113.7 --from 2026-11-25T14:00 --to 2026-11-25T14:05   # who was behind it
    """
    import ipaddress

    try:
        address = str(ipaddress.ip_address(address))
    except ValueError:
        raise click.BadParameter(f"'{address}' is not an IPv4 or IPv6 address", param_hint="ADDRESS") from None
    from . import output

    eng = _open(start, end, engine, master, progress, as_of)
    try:
        prof = eng.host(address, top_n, nat_rows)
    except RuntimeError as exc:  # duck.LakeReadError
        raise click.ClickException(str(exc)) from None
    finally:
        eng.close()
    if fmt == "json":
        click.echo(json.dumps(output.deep(prof), indent=1))
        return
    if not prof["flows"] and not prof["nat_total"]:
        click.echo(f"{address}: no flows in the selected time range")
        return
    if prof["flows"]:
        click.echo(f"{address}: {prof['flows']} flows with {prof['peers']} peers, first seen "
                   f"{output.jsonable(prof['first_seen'])}, last seen {output.jsonable(prof['last_seen'])}; "
                   f"{prof['bytes_out']} bytes out, {prof['bytes_in']} bytes in")
        output.table(prof["top_peers"], ["peer", "flows", "bytes", "bytes_out", "bytes_in", "packets", "ports",
                                         "first_seen", "last_seen"], "Top peers by bytes")
        output.table(prof["top_ports"], ["proto", "port", "role", "flows", "bytes", "peers"],
                     "Ports (role out: host is client, in: host serves)")
        output.table(prof["hourly"], ["hour", "flows", "bytes_out", "bytes_in", "peers"], "By hour")
    else:
        click.echo(f"{address}: no flows of its own in the selected time range, only NAT translations")
    if prof["nat_total"]:
        shown = f", the first {len(prof['nat'])} by first seen" if len(prof["nat"]) < prof["nat_total"] else ""
        output.table(prof["nat"], ["kind", "inside_addr", "inside_port", "outside_addr", "outside_port", "nat_event",
                                   "first_seen", "last_seen", "flows"],
                     f"NAT translations ({prof['nat_total']}{shown}; kind source: inside = flow's source, "
                     "destination: inside = the translated destination)")
    if eng.name == "local":
        quick_exit()


@click.command("query-index", context_settings={"help_option_names": ["-h", "--help"]})
def index_cmd():
    """Copy each closed hour of the lake's flows into a DuckDB file for fast queries.

    Only hours the compactor has not rewritten yet: a compacted hour's Parquet files
    read as fast as an index. `flowlake query` reads an hour from its index when the
    index matches the hour's Parquet files, and from the Parquet files otherwise:
    answers never differ, only their speed. Keeps the last [query] index_days days (0: no index). Run it after
    hours close (cron, or the hour-close job); it skips what is already indexed.

    \b
    Example:
      flowlake query-index && flowlake query 'proto tcp and dst port 443' -s srcip/bytes
    """
    from flowlake.base import config

    from .index import build, root

    cfg = config.get()
    res = build(cfg, log=lambda m: click.echo(m, err=True))
    click.echo(f"query index: {res['built']} hours built ({res['flows']:,} flows), {res['fresh']} already current, "
               f"{res['removed']} files removed; {root(cfg)}")


@click.command("query-server", context_settings={"help_option_names": ["-h", "--help"]})
def server_cmd():
    """Answer `flowlake query` commands from one warm process (the stack's query server).

    A command spends ~0.15 CPU-s starting (Python, DuckDB's library, the parser, the
    config) before it reads a flow; this server has all of that loaded. A `flowlake query`
    finds its socket ($FLOWLAKE_HOME/run/query.sock) and hands over its question with its
    own stdin, stdout and stderr; a child of the server answers exactly as the command
    would (same output, progress, exit status) and exits. Help, errors and the Spark
    engine stay with the command. Without a server, or when it is busy
    ([query] server_max_clients answers at once), commands answer themselves.

    `flowlake up` starts it ([query] server = true) and `flowlake status` shows it; run it
    by hand only for a lake without the stack. Stop it with SIGTERM.

    \b
    Example:
      flowlake query-server &   # then, in any shell of this user:
      flowlake query 'proto tcp and dst port 443' -s srcip/bytes
    """
    from flowlake.base import config

    from .server import serve

    serve(config.get())
