"""`flowlake query` and `flowlake host`: nfdump-style investigation over the lake."""
from __future__ import annotations

import datetime as dt
import json
import sys

import click

FLOW_COLUMNS = ["time_start", "time_end", "exporter", "input_if", "output_if", "src_addr", "dst_addr",
                "src_port", "dst_port", "proto", "tcp_flags", "tos", "packets", "bytes", "sampling_rate",
                "src_as", "dst_as", "source_file", "file_seq"]


def _time(ctx, param, value):
    if value is None:
        return None
    from .lake import TimeError, parse_time

    try:
        return parse_time(value)
    except TimeError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def _jsonable(v):
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        return v.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(v, float) and v != v:
        return None
    return v


def _rows_out(rows: list[dict], columns: list[str], fmt: str, title: str = "") -> None:
    if fmt == "json":
        click.echo(json.dumps([{c: _jsonable(r[c]) for c in columns} for r in rows], indent=1))
    elif fmt == "csv":
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(columns)
        for r in rows:
            w.writerow([_jsonable(r[c]) for c in columns])
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title or None, show_lines=False)
        for c in columns:
            table.add_column(c, justify="right" if rows and isinstance(rows[0][c], (int, float)) else "left")
        for r in rows:
            table.add_row(*["" if r[c] is None else str(_jsonable(r[c])) for c in columns])
        Console(width=max(160, 12 * len(columns))).print(table)


def _session(master):
    from flowlake import config
    from flowlake import spark as spark_factory

    cfg = config.get()
    return cfg, spark_factory.session("flowlake-query", master=master, cfg=cfg)


def _read(spark, cfg, start, end):
    from .lake import read_flows

    if start and end and end <= start:
        raise click.BadParameter(f"--to {end:%Y-%m-%dT%H:%M:%S} is not after --from {start:%Y-%m-%dT%H:%M:%S}")
    try:
        return read_flows(spark, cfg.lake, start, end)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None


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
@click.option("--master", default=None, help="Spark master (default: config [spark] master).")
def query(filter_text, start, end, stats, top_n, aggregate_keys, fmt, limit, master):
    """Search the flow lake with nfdump's filter syntax; Spark does the work.

    FILTER is an nfdump 1.7 filter (quote it for the shell). Supported primitives:
    [src|dst] ip|host ADDR, [src|dst] net PREFIX/LEN or net ADDR MASK,
    [src|dst] ip in [ADDR, NET ...], [src|dst] port [COMP] N, [src|dst] port in [N ...],
    proto tcp|udp|icmp|icmp6|N, flags SAFRPU (all set; `not flags` = none set),
    [src|dst] as [COMP] N, as in [...], [in|out] if N, router ip ADDR,
    bytes|packets|duration|bps|pps|bpp|tos [COMP] N (K/M/G = 1000-based; duration in ms),
    ipv4|ipv6, any; combined with and/&&, or/||, not/!, parentheses.
    COMP is one of = == < > <= >= eq lt gt le ge.

    \b
    Examples:
      flowlake query 'proto tcp and dst port 22 and flags S and not flags A' --stats srcip/flows
      flowlake query 'src net 10.0.0.0/8 and bytes > 1M' --from 2026-11-25 --to 2026-11-26
      flowlake query 'ip in [192.0.2.10 2001:db8::/32]' --format json --limit 0 > flows.json
      flowlake query 'proto udp' -A srcip,dstport --format csv
      flowlake query any -s dstport/bytes -s srcip/packets -n 20
    """
    from .parser import FilterError, parse
    from .stats import StatError, aggregate, parse_aggregate, parse_stat, top

    try:
        tree = parse(filter_text)
    except FilterError as exc:
        raise click.BadParameter("\n" + str(exc), param_hint="FILTER") from None
    try:
        stat_specs = [parse_stat(s) for s in stats]
        agg = parse_aggregate(aggregate_keys) if aggregate_keys else None
    except StatError as exc:
        raise click.BadParameter(str(exc), param_hint="--stats/--aggregate") from None

    from . import to_column

    cfg, spark = _session(master)
    flows = _read(spark, cfg, start, end).where(to_column(tree))
    if limit is None:
        limit = 20 if fmt == "table" else 0

    if stat_specs:
        out = {}
        for key, order in stat_specs:
            rows = [r.asDict() for r in top(flows, key, order, top_n).collect()]
            out[f"{key}/{order}"] = rows
            if fmt != "json":
                cols = ["rank", "val", "flows", "flows_pct", "packets", "packets_pct", "bytes", "bytes_pct",
                        "first_seen", "duration_s", "pps", "bps", "bpp"]
                _rows_out(rows, cols, fmt, title=f"Top {top_n or 'all'} {key} ordered by {order}")
        if fmt == "json":
            click.echo(json.dumps({k: [{c: _jsonable(v) for c, v in r.items()} for r in rows]
                                   for k, rows in out.items()}, indent=1))
        return
    if agg:
        df = aggregate(flows, agg)
        rows = [r.asDict() for r in (df.limit(limit) if limit else df).collect()]
        _rows_out(rows, agg + ["flows", "packets", "bytes", "first_seen", "last_seen", "pps", "bps", "bpp"], fmt,
                  title=f"Aggregated by {','.join(agg)}")
        return
    df = flows.orderBy("time_start", "file_seq")
    rows = [r.asDict() for r in (df.limit(limit) if limit else df).collect()]
    _rows_out(rows, FLOW_COLUMNS if fmt != "table" else
              ["time_start", "time_end", "proto", "src_addr", "src_port", "dst_addr", "dst_port",
               "tcp_flags", "packets", "bytes"], fmt)


@click.command("host", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("address")
@click.option("--from", "start", callback=_time, help="First time to read (UTC).")
@click.option("--to", "end", callback=_time, help="Read flows starting before this time (UTC).")
@click.option("-n", "top_n", type=click.IntRange(min=1), default=10, show_default=True, help="Peers and ports to list.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--master", default=None, help="Spark master (default: config [spark] master).")
def host(address, start, end, top_n, fmt, master):
    """Profile one host: peers, ports, volume by hour, first and last seen.

    \b
    Examples:
      flowlake host 198.51.100.66
      flowlake host 2001:db8::1 --from 2026-11-25 --to 2026-11-26 --format json
    """
    import ipaddress

    try:
        address = str(ipaddress.ip_address(address))
    except ValueError:
        raise click.BadParameter(f"'{address}' is not an IPv4 or IPv6 address", param_hint="ADDRESS") from None
    from .host import profile

    cfg, spark = _session(master)
    prof = profile(_read(spark, cfg, start, end), address, top_n)
    if fmt == "json":
        click.echo(json.dumps(_deep(prof), indent=1))
        return
    if not prof["flows"]:
        click.echo(f"{address}: no flows in the selected time range")
        return
    click.echo(f"{address}: {prof['flows']} flows with {prof['peers']} peers, first seen "
               f"{_jsonable(prof['first_seen'])}, last seen {_jsonable(prof['last_seen'])}; "
               f"{prof['bytes_out']} bytes out, {prof['bytes_in']} bytes in")
    _rows_out(prof["top_peers"], ["peer", "flows", "bytes", "bytes_out", "bytes_in", "packets", "ports",
                                  "first_seen", "last_seen"], "table", "Top peers by bytes")
    _rows_out(prof["top_ports"], ["proto", "port", "role", "flows", "bytes", "peers"], "table",
              "Ports (role out: host is client, in: host serves)")
    _rows_out(prof["hourly"], ["hour", "flows", "bytes_out", "bytes_in", "peers"], "table", "By hour")


def _deep(o):
    if isinstance(o, dict):
        return {k: _deep(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_deep(v) for v in o]
    return _jsonable(o)
