"""The work of `flowlake query` once its options are read, without click: shared by the
click command (cli.py) and the fast path that skips click (fast.py), so both print the
same bytes."""
from __future__ import annotations

import json
import sys

from . import output
from .spec import FLOW_COLUMNS, MEASURES, TOP_COLUMNS, parse_aggregate, parse_stat


def prepare(filter_text: str, stats, aggregate_keys):
    """(filter tree, [(key, order)], aggregate keys or None); FilterError or StatError."""
    from .parser import parse  # noqa: PLC0415  (start-up: lark)

    tree = parse(filter_text)
    return tree, [parse_stat(s) for s in stats], (parse_aggregate(aggregate_keys) if aggregate_keys else None)


def answer(eng, tree, stat_specs, top_n, agg, fmt, limit, anon, out=None) -> None:
    """Print the query's answer on out (stdout): top-N statistics, an aggregate or records."""
    out = out or sys.stdout
    if stat_specs:
        tops = {k: list(anon(rows)) for k, rows in eng.tops(tree, stat_specs, top_n).items()}
        if fmt == "json":
            out.write(json.dumps({k: [output.deep(r) for r in rows] for k, rows in tops.items()}, indent=1) + "\n")
            out.flush()
            return
        cols = [c for c in TOP_COLUMNS if c != "last_seen"]
        for (key, order), rows in zip(stat_specs, tops.values()):
            output.stream(rows, cols, fmt, title=f"Top {top_n or 'all'} {key} ordered by {order}", out=out)
        return
    if agg:
        rows = anon(eng.aggregate(tree, agg, "flows", limit))
        output.stream(rows, agg + [c for c in MEASURES if c != "duration_s"], fmt,
                      title=f"Aggregated by {','.join(agg)}", out=out)
        return
    cols = FLOW_COLUMNS if fmt != "table" else ("time_start", "time_end", "proto", "src_addr", "src_port",
                                                "dst_addr", "dst_port", "tcp_flags", "packets", "bytes")
    output.stream(anon(eng.records(tree, limit)), cols, fmt, out=out)
