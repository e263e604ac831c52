"""The quick start of `flowlake query` (issue 22): the fast path that skips click, the
pre-built filter parser, and the investigation index only where it pays.

The answers themselves are held equal to nfdump by test_query.py and test_query_vlan.py
(through click); here the fast path must print exactly what the click command prints."""
from __future__ import annotations

import datetime as dt
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLOWLAKE = str(Path(sys.executable).with_name("flowlake"))
# the console script, reporting which heavy modules were loaded when the answer ended the process
# (the schemas and the compactor: the module move had put them on the fast path, +9 ms a command)
def probe(watched: tuple[str, ...]) -> str:
    return ("import os, sys\nend = os._exit\n"
            "def loaded(code):\n"
            f"    print('LOADED', sorted(m for m in {watched!r} if m in sys.modules), file=sys.stderr)\n"
            "    sys.stderr.flush()\n    end(code)\n"
            "os._exit = loaded\nsys.argv[0] = 'flowlake'\nfrom flowlake.console import run\nrun()")


PROBE = probe(("click", "lark", "rich", "pyarrow", "flowlake.schemas", "flowlake.pipelines.compact", "deltalake"))


def _bench():
    spec = importlib.util.spec_from_file_location("bench_query", ROOT / "bench" / "query.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def home(tmp_path_factory, cfg) -> Path:
    """A day of synthetic flows as bench/query.py writes it (every hour compacted), hour 05
    then turned back into an ingest batch file: an hour closed but not compacted."""
    bench = _bench()
    home = tmp_path_factory.mktemp("query-fast-home")
    bench.write_lake(bench.synth(24_000, seed=7), home)
    hour = home / "lake" / "flows" / f"date={bench.DAY:%Y-%m-%d}" / "hour=05"
    (f,) = hour.glob("c*.parquet")
    f.rename(hour / "b7-0.zstd.parquet")
    return home


def _env(home: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWLAKE_")}
    return {**env, "FLOWLAKE_HOME": str(home), "FLOWLAKE_QUERY_ENGINE": "local", **extra}


def _cfg(home: Path, **extra):
    from flowlake.base import config

    return config.load(env={**_env(home), "FLOWLAKE_QUERY_INDEX_DAYS": "100000", **extra})


def _flowlake(home: Path, args: list[str], fast: bool = True) -> subprocess.CompletedProcess:
    env = _env(home, FLOWLAKE_QUERY_FAST_START="true" if fast else "false")
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=120)


QUESTIONS = [
    ["query", "proto tcp and dst port 443", "-s", "srcip/bytes"],
    ["query", "-s", "dstport/flows", "-s", "srcip/packets", "-n5", "not flags AS"],
    ["query", "--stats=ip/bytes", "-n", "0", "--format", "json", "src net 10.1.0.0/16"],
    ["query", "proto udp", "-A", "srcip,dstport", "--format", "csv", "--limit", "7"],
    ["query", "bytes > 100k", "--format=json", "--limit", "0", "--from", "2026-11-20T03:00",
     "--to", "2026-11-20T06:30"],
    ["query", "--no-progress", "--engine", "local", "--", "port in [53 123] and not proto tcp"],
    ["query"],
]


@pytest.mark.parametrize("args", QUESTIONS, ids=[" ".join(a[1:])[:40] for a in QUESTIONS])
def test_fast_path_prints_what_click_prints(home, args):
    fast, slow = _flowlake(home, args), _flowlake(home, args, fast=False)
    assert fast.returncode == slow.returncode == 0, (fast.stderr, slow.stderr)
    assert fast.stdout == slow.stdout and len(fast.stdout.splitlines()) >= 3
    # the fast path answered without click, and with the pre-built parser instead of lark
    assert fast.stderr.strip().splitlines()[-1] == "LOADED []", fast.stderr
    assert "'click'" in slow.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("args", [
    ["query", "--help"],
    ["query", "dst port foo"],                       # a bad filter: click's caret message
    ["query", "any", "-s", "srcip/nonsense"],
    ["query", "any", "--from", "yesterday-ish"],
    ["query", "any", "--to", "2026-11-20", "--from", "2026-11-21"],
    ["query", "any", "-n", "-1"],
    ["query", "any", "--format", "xml"],
    ["query", "any", "--bogus"],
    ["query", "any", "extra"],
    ["query", "any", "-s"],
])
def test_fast_path_leaves_help_and_errors_to_click(home, args):
    fast, slow = _flowlake(home, args), _flowlake(home, args, fast=False)
    assert (fast.returncode, fast.stdout, fast.stderr) == (slow.returncode, slow.stdout, slow.stderr)
    assert fast.returncode == (0 if "--help" in args else 2)
    assert ("Usage: flowlake query" in fast.stdout) if "--help" in args else ("Error" in fast.stderr)


def test_fast_path_reads_options_as_click_does():
    from flowlake.jobs.query.fast import parse_args

    got = parse_args(["-sdstip/bytes", "--stats", "srcip", "-n", "3", "-n7", "proto tcp", "--progress",
                      "--limit=0", "--format", "csv", "-A", "srcip"])
    assert got == {"filter_text": "proto tcp", "start": None, "end": None, "stats": ["dstip/bytes", "srcip"],
                   "top_n": 7, "aggregate_keys": "srcip", "fmt": "csv", "limit": 0, "engine": None,
                   "progress": True, "as_of": None, "count_at": None}
    assert parse_args(["--as-of", "3", "any"])["as_of"] == "3"
    assert parse_args(["--count-at", "key", "any"])["count_at"] == "key"
    assert parse_args(["--count-at", "twice", "any"]) is None  # click names the bad value
    assert parse_args(["--", "-x"])["filter_text"] == "-x"
    for declined in (["--engine", "spark"], ["--master", "local[1]"], ["--anonymise"], ["--key-file", "k"],
                     ["-h"], ["-n", "3x"], ["-n"], ["a", "b"], ["--limit", "-1"], ["-v"]):
        assert parse_args(declined) is None, declined


def test_fast_path_options_derived_from_click(monkeypatch):
    """`flowlake query`'s options are defined once (cli.py): the fast path's table is derived
    from the click command, the generated _options.py is current, and for every argv the fast
    path accepts it reads what click reads."""
    import click

    from flowlake.jobs.query import fast, fast_options
    from flowlake.jobs.query.cli import query
    from flowlake.jobs.query.lake import parse_as_of, parse_time

    derived = fast_options.derive()
    assert fast.VALUE_OPTIONS == derived["value_options"] and fast.DEFAULTS == derived["defaults"]
    assert fast.CHOICES == {k: tuple(v) for k, v in derived["choices"].items()}
    assert fast.FLAGS == {o: tuple(v) for o, v in derived["flags"].items()}
    assert fast.RANGES == {k: tuple(v) for k, v in derived["ranges"].items()} and fast.MULTIPLE == {"stats"}
    assert fast_options.MODULE_FILE.exists() and fast_options.MODULE_FILE.read_text() == fast_options.source(), \
        "jobs/query/_options.py is missing or stale: run `python -m flowlake.jobs.query.standalone` (make setup)"
    for argv in (["-sdstip/bytes", "--stats", "srcip", "-n", "3", "-n7", "proto tcp", "--progress", "--limit=0",
                  "--format", "csv", "-A", "srcip"], [], ["--no-progress", "--engine", "local", "any"],
                 ["--from", "2026-11-25T10:00", "--to=2026-11-25T11:00", "-n0", "--format=json", "--limit", "5"],
                 ["--engine=auto", "--aggregate", "srcip,dstport", "--", "-x"], ["--as-of", "4", "any"],
                 ["--as-of=2026-11-27T15:00+01:00", "-n", "2"]):
        got = fast.parse_args(argv)
        assert got is not None, argv
        ctx = query.make_context("query", list(argv))
        want = {k: v for k, v in ctx.params.items() if k in fast_options.HANDLED}
        want["stats"] = list(want["stats"])
        for k in ("start", "end"):
            got[k] = parse_time(got[k]) if got[k] is not None else None
        got["as_of"] = parse_as_of(got["as_of"]) if got["as_of"] is not None else None
        assert got == want, argv
    # an option the fast path neither answers nor leaves to click: the derivation refuses it
    extra = click.Command("query", params=list(query.params) + [click.Option(["--sample"], default=None)])
    with pytest.raises(RuntimeError, match="--sample"):
        fast_options.derive(extra)
    # a generated table older than cli.py is not used: every command goes to click
    monkeypatch.setattr(fast, "checksum", lambda: -1)
    assert fast._table() is None


def test_index_only_for_hours_not_compacted_and_a_dropped_file_reads_parquet(home):
    from flowlake.jobs.query import index, parse
    from flowlake.jobs.query.duck import DuckEngine

    cfg = _cfg(home)
    res = index.build(cfg, now=dt.datetime(2026, 11, 22, tzinfo=dt.timezone.utc))
    assert res["built"] == 1 and res["flows"] > 0  # hour 05 only: the 23 compacted hours are read as they are
    (ix_file,) = index.root(cfg).rglob("*.duckdb")
    assert ix_file.parent.name == "date=2026-11-20" and ix_file.name.startswith("hour=05-")

    plain = DuckEngine(cfg, use_index=False)
    duck = DuckEngine(cfg)
    assert [p.name for p, _, ix in duck.parts if ix is not None] == ["hour=05"]
    flt = parse("proto tcp and dst port 443")
    want = plain.top(flt, "srcip", "bytes", 0)
    assert want and duck.top(flt, "srcip", "bytes", 0) == want
    duck.close()

    # `flowlake query-index` drops the file between a query's lookup and its ATTACH
    dropping = DuckEngine(cfg)
    assert any(ix is not None for _, _, ix in dropping.parts)
    ix_file.unlink()
    assert dropping.top(flt, "srcip", "bytes", 0) == want
    assert list(dropping.records(parse("bytes > 100k"))) == list(plain.records(parse("bytes > 100k")))
    dropping.close()
    plain.close()
    # and the whole command answers as before
    assert _flowlake(home, ["query", "proto tcp and dst port 443", "-s", "srcip/bytes"]).returncode == 0


FILTERS = [
    "any", "proto tcp and dst port 443", "src net 10.1.0.0/16", "ip in [10.0.3.7 10.2.0.0/24 192.0.2.0/28]",
    "bytes > 100k", "flags S and not flags A", "port in [53 123 8080] and not proto tcp", "not flags AS",
    "dst net 192.0.2.0/25 and packets < 3 and duration > 30", "src vlan 210 or dst vlan 7", "in if 3 and out if 4",
    "(proto udp or proto icmp) && !(src port 53)", "proto ipv6 or ipv6", "router ip 127.0.0.1", "as in [1 2, 3]",
    "dst as >= 64512", "net 10.0.0.0 255.0.0.0", "tos 8 and bpp gt 100 and pps le 1k", "src ip in [2001:db8::/32]",
    "PROTO TCP AND NOT DST PORT EQ 22", "host 10.0.0.1 # a comment",
    # errors: the same exception at the same place
    "dst port foo", "proto tcp )", "proto tcp and", "((any)", "port in [1 2", "src", "@", "proto tcp and blah",
]


def _shape(parser, text):
    """A parse tree or error of either runtime, as plain data."""
    try:
        tree = parser.parse(text)
    except Exception as exc:  # noqa: BLE001 - the class and place are what is compared
        tok = getattr(exc, "token", None)
        return ("error", type(exc).__name__, getattr(exc, "pos_in_stream", None),
                None if tok is None else (tok.type, str(tok)), sorted(getattr(exc, "expected", None) or []))

    def plain(node):
        if hasattr(node, "children"):
            return (str(node.data), [plain(c) for c in node.children])
        return (node.type, str(node), node.start_pos)
    return plain(tree)


def test_prebuilt_parser_parses_as_lark(tmp_path):
    """The stand-alone module (built by `make setup`) is in use, and a fresh build of it
    gives lark's trees and errors for every filter."""
    from lark import Lark

    from flowlake.jobs.query import parser, standalone

    assert parser._STANDALONE is not None, "jobs/query/_filter_lalr.py missing or stale: run `make setup`"
    assert standalone.build() is False  # built from the current grammar
    (tmp_path / "fresh_lalr.py").write_text(standalone.source())
    spec = importlib.util.spec_from_file_location("fresh_lalr", tmp_path / "fresh_lalr.py")
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    ref = Lark(standalone.GRAMMAR_FILE.read_text(), **standalone.OPTIONS)
    for runtime in (fresh.Lark_StandAlone(), parser._lark()):
        for text in FILTERS:
            assert _shape(runtime, text) == _shape(ref, text), text
    assert sum(_shape(ref, t)[0] == "error" for t in FILTERS) == 7


def test_config_read_through_its_parse_cache(tmp_path, monkeypatch):
    """flowlake.toml parsed once and kept (marshal, the user's cache folder): the same
    tables as tomllib's, re-read when the file changes, a damaged cache ignored, and shown
    in `flowlake status`."""
    import tomllib

    from flowlake.base import config, parsed_cache
    from flowlake.jobs.query.status import status

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def settle(path, age_s=10):  # a file untouched for a while (the cache trusts only those)
        t = time.time_ns() - age_s * 1_000_000_000
        os.utime(path, ns=(t, t))
        return t

    user = tmp_path / "flowlake.toml"
    user.write_text('[query]\nthreads = 3\n')
    settle(user)
    env = {"FLOWLAKE_CONFIG": str(user), "FLOWLAKE_HOME": str(tmp_path / "home")}
    first = config.load(env=env)
    cached = sorted((tmp_path / "cache" / "flowlake").glob("toml-*.marshal"))
    assert len(cached) == 2  # the defaults and the user's file
    assert parsed_cache.get(config.DEFAULTS_FILE) == tomllib.loads(config.DEFAULTS_FILE.read_text())
    assert config.load(env=env).data == first.data and first.query.threads == 3
    user.write_text('[query]\nthreads = 5\n# longer now\n')
    assert config.load(env=env).query.threads == 5  # size and mtime changed: parsed again
    # racy: a same-size rewrite inside one clock tick keeps size and mtime; a file changed in
    # the last seconds is never taken from (nor put into) the cache, so it is read as it is now
    racy = tmp_path / "racy.toml"
    racy.write_text('[query]\nthreads = 6\n')
    tick = racy.stat().st_mtime_ns
    assert config.load(env={**env, "FLOWLAKE_CONFIG": str(racy)}).query.threads == 6
    racy.write_text('[query]\nthreads = 7\n')
    os.utime(racy, ns=(tick, tick))
    assert config.load(env={**env, "FLOWLAKE_CONFIG": str(racy)}).query.threads == 7
    assert parsed_cache.get(racy) is None
    settle(user)
    for f in cached:
        f.write_bytes(b"\x00garbage")
    assert config.load(env=env).data == config.load(env=env).data and config.load(env=env).query.threads == 5
    for i in range(parsed_cache.MAX_FILES + 3):  # many short-lived config files: the newest kept
        other = tmp_path / f"other{i}.toml"
        other.write_text(f"[query]\nthreads = {i}\n")
        settle(other)
        assert config.load(env={**env, "FLOWLAKE_CONFIG": str(other)}).query.threads == i
    assert len(list((tmp_path / "cache" / "flowlake").glob("toml-*.marshal"))) == parsed_cache.MAX_FILES
    assert parsed_cache.get(other) == {"query": {"threads": parsed_cache.MAX_FILES + 2}}
    user.write_text('[query]\nthreads = 5\n# longer now\n')
    st = status(config.load(env=env))
    assert st["cache_dir"] == str(tmp_path / "cache" / "flowlake") and st["cache_bytes"] > 0
    assert st["cache_files"] == parsed_cache.MAX_FILES
    assert st["fast_start"] is True and st["parser"] == "pre-built"


def test_files_in_folders_below_an_hour_are_read(tmp_path, cfg):
    """DuckEngine reads every Parquet file the snapshot pins below an hour, as Spark does,
    also those in a (non-hidden) folder under it."""
    from flowlake.jobs.query import parse
    from flowlake.jobs.query.duck import DuckEngine

    bench = _bench()
    home = tmp_path / "nested"
    bench.write_lake(bench.synth(6_000, seed=3), home)
    c = _cfg(home)

    def count() -> int:
        eng = DuckEngine(c, use_index=False)
        try:
            return sum(r["flows"] for r in eng.aggregate(parse("any"), ["proto"]))
        finally:
            eng.close()

    assert count() == 6_000
    hour = home / "lake" / "flows" / f"date={bench.DAY:%Y-%m-%d}" / "hour=07"
    (f,) = hour.glob("*.parquet")
    (hour / "part").mkdir()
    f.rename(hour / "part" / f.name)
    assert count() == 6_000
