"""`flowlake query` without click: the console script's fast path (flowlake/console.py).

Why: importing click and the CLI's group costs ~0.02 CPU-s per command, a tenth of
`nfdump -R`'s whole answer on a day (bench/query.py). A plain question on the local
engine (DuckDB) has its options read here, the way click reads them, and is answered by
the same code as the click command (answer.py). Anything else goes to click, which then
prints its usual help or error: --help, --engine spark or --master, --anonymise and
--key-file, an option or value this reader does not know or that fails to parse (a bad
filter, statistic or time, a lake not found, a configuration error). So help texts and
error messages stay click's; only errors after the answer has started (a file unreadable
mid-scan) are printed here, in click's words ("Error: ...", exit status 1).
`[query] fast_start = false` (FLOWLAKE_QUERY_FAST_START) sends every query through click.
The options are defined once, by the click command: fast_options.py derives this reader's
table from it into _options.py at `make setup`; without a current table, click answers.
"""
from __future__ import annotations

import os
import re
import sys

CLI_FILE = os.path.join(os.path.dirname(__file__), "cli.py")


def checksum() -> int:
    """cli.py's CRC-32: the generated option table is current while it matches."""
    import zlib

    with open(CLI_FILE, "rb") as f:
        return zlib.crc32(f.read())


def _table() -> dict | None:
    """The option table generated from the click command (_options.py, fast_options.py), or
    None when missing or older than cli.py: then every command goes to click."""
    try:
        from . import _options
    except ImportError:
        return None
    return _options.TABLE if getattr(_options, "CLI_CRC32", None) == checksum() else None


_T = _table() or {"value_options": {}, "flags": {}, "choices": {}, "ranges": {}, "multiple": [], "defaults": {}}
VALUE_OPTIONS = _T["value_options"]  # option string -> name: --from, -s/--stats, -n, --format, ...
FLAGS = {o: tuple(nv) for o, nv in _T["flags"].items()}  # --progress/--no-progress -> (name, value)
CHOICES = {k: tuple(v) for k, v in _T["choices"].items()}  # engine spark: click's path
RANGES = {k: tuple(v) for k, v in _T["ranges"].items()}  # integer options: (min, max)
MULTIPLE = frozenset(_T["multiple"])
DEFAULTS = _T["defaults"]
COUNT = re.compile(r"[0-9]+")


def parse_args(argv: list[str]) -> dict | None:
    """The query command's options as click would read them, or None when click must read
    them (anything unusual, including every error, and everything without the table)."""
    if not DEFAULTS:
        return None
    opts = {k: list(v) if isinstance(v, list) else v for k, v in DEFAULTS.items()}
    args = list(argv)
    positional: list[str] = []
    while args:
        tok = args.pop(0)
        if tok == "--":
            positional += args
            break
        if not tok.startswith("-") or tok == "-":
            positional.append(tok)
            continue
        if tok in FLAGS:
            name, value = FLAGS[tok]
            opts[name] = value
            continue
        if tok.startswith("--"):
            name, eq, value = tok.partition("=")
            if name not in VALUE_OPTIONS or (not eq and not args):
                return None
            value = value if eq else args.pop(0)
        else:  # a short option: -s VALUE or -sVALUE
            name, value = tok[:2], tok[2:]
            if name not in VALUE_OPTIONS:
                return None
            if not value:
                if not args:
                    return None
                value = args.pop(0)
        key = VALUE_OPTIONS[name]
        if key in MULTIPLE:
            opts[key].append(value)
        else:
            opts[key] = value
    if len(positional) > 1:
        return None
    opts["filter_text"] = positional[0] if positional else "any"
    for key, allowed in CHOICES.items():
        if opts[key] is not None and opts[key] not in allowed:
            return None
    for key, (lo, hi) in RANGES.items():
        if opts[key] is not None:
            if not COUNT.fullmatch(opts[key]):
                return None
            opts[key] = int(opts[key])
            if (lo is not None and opts[key] < lo) or (hi is not None and opts[key] > hi):
                return None
    return opts


def run(argv: list[str]) -> bool:
    """Answer `flowlake query ARGV` and end the process; False (nothing printed) when click
    must handle it."""
    status = answer_argv(argv)
    if status is None:
        return False
    # the answer is complete: skip the interpreter's teardown, as flowlake.cli.quick_exit
    try:
        sys.stderr.flush()
    except OSError:
        pass
    os._exit(status)


def answer_argv(argv: list[str]) -> int | None:
    """Answer `flowlake query ARGV` on stdout: the exit status, or None (nothing printed)
    when click must handle it. Also what the warm query server runs (server.py)."""
    opts = parse_args(argv)
    if opts is None:
        return None
    from flowlake.base import config

    from .answer import answer, prepare
    from .engines import choose, open_engine, say_rule, say_version, show_progress
    from .lake import parse_as_of, parse_time

    try:
        cfg = config.get()
        if not bool(cfg.query.fast_start):
            return None
        tree, stat_specs, agg = prepare(opts["filter_text"], opts["stats"], opts["aggregate_keys"])
        start, end = (parse_time(opts[k]) if opts[k] is not None else None for k in ("start", "end"))
        if (start and end and end <= start) or choose(cfg, opts["engine"]) != "local":
            return None
        as_of = parse_as_of(opts["as_of"]) if opts.get("as_of") is not None else None
        eng = open_engine(cfg, start, end, opts["engine"], None, show_progress(cfg, opts["progress"]), as_of=as_of,
                          count_at=opts.get("count_at"))
    except (ValueError, OSError, config.ConfigError):  # FilterError, StatError, TimeError, AsOfError,
        return None                                     # CountRuleError, no lake: click's
    say_version(eng, as_of)
    say_rule(eng, opts.get("count_at"))
    fmt, limit = opts["fmt"], opts["limit"]
    if limit is None:
        limit = 20 if fmt == "table" else 0
    status = 0
    try:
        answer(eng, tree, stat_specs, opts["top_n"], agg, fmt, limit, lambda rows: rows)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: click's way out, status 1 and nothing more
        status = 1
    except RuntimeError as exc:  # duck.LakeReadError: a file unreadable or replaced while read
        status = 1
        _stderr(f"Error: {exc}")
    except KeyboardInterrupt:
        status = 1
        _stderr("\nAborted!")
    finally:
        eng.close()
    return status


def _stderr(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
    except OSError:
        pass
