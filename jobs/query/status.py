"""`flowlake status`'s query lines: the engine, files per hour, the index, the server, and the
engines the reports and the queries would run on (jobs/engines.py; `engines` holds the
choice, jobs.engines.status_line(st["query"]["engines"]) says it in one line)."""
from __future__ import annotations


def status(cfg) -> dict:
    """For `flowlake status`: the engine queries would use, how many files they open (a
    query's start-up grows with files per hour; compaction keeps it small) and the index."""
    from flowlake.base import parsed_cache

    from .. import engines
    from . import index, parser, server
    from .engines import choose, duck_threads
    from .lake import partitions

    out = {"engine": choose(cfg), "threads": duck_threads(int(cfg.query.threads)), "hours": 0, "files": 0,
           "max_files_per_hour": 0, **index.status(cfg),
           # a command's start: the fast path (fast.py), the pre-built parser (standalone.py), the parse cache
           "fast_start": bool(cfg.query.fast_start), "parser": "pre-built" if parser._STANDALONE else "lark",
           **parsed_cache.status(), "server": server.status(cfg),
           # what [reports] engine and [query] engine pick here (jobs/engines.py, one rule)
           "engines": engines.status(cfg)}
    try:
        parts = partitions(cfg.lake)
    except FileNotFoundError:
        return out
    if not parts:
        return out
    from flowlake.pipelines.lake_read import lake_files  # noqa: PLC0415  (start-up: flowlake status only)

    # the files a reader opens: a Delta table's current version (files a compaction replaced
    # wait on disk for VACUUM and are no reader's), a Parquet lake's visible files
    files = lake_files(cfg.lake, "flows", parts)[1]
    for p in parts:
        prefix = str(p) + "/"
        n = sum(1 for f in files if f.startswith(prefix))
        out["hours"] += 1
        out["files"] += n
        out["max_files_per_hour"] = max(out["max_files_per_hour"], n)
    return out
