"""flowlake query: nfdump filter syntax over the lake, checked against nfdump itself.

Real data path: a pcap written here -> softflowd (IPFIX) -> a real nfcapd -> one nfcapd
file. nfdump reads that file; the same flows, decoded by `nfdump -o json`, become a
lake partition in the FLOWS_TABLE shape (written by Spark, as the ingest writes). Every
filter must select the same records on both engines (Spark, and DuckDB over the lake's
files) as nfdump selects from the file, `--stats` must equal `nfdump -s`, and the two
engines must give the same rows, row for row.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import random
import shutil
import struct
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings, HealthCheck
from hypothesis import strategies as st

from flowlake.jobs.query import FilterError, parse

import nfcapd_capture  # tests/ is on sys.path (pytest prepends the test file's directory)

T0 = 1795600800.0  # 2026-11-25 10:00:00 UTC
DAY = dt.date(2026, 11, 25)


# ---- a pcap with known traffic --------------------------------------------------------
def _csum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    return ~(s + (s >> 16)) & 0xFFFF


def _packet(src, dst, proto, sport, dport, flags, size, icmp):
    import ipaddress

    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    if proto == 6:
        l4 = struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 0x50, flags, 8192, 0, 0)
    elif proto == 17:
        l4 = struct.pack("!HHHH", sport, dport, 8, 0)
    else:
        l4 = struct.pack("!BBHI", icmp[0], icmp[1], 0, 0)
    l4 += b"\0" * max(0, size - (40 if s.version == 6 else 20) - len(l4))
    if proto == 17:
        l4 = l4[:4] + struct.pack("!H", len(l4)) + l4[6:]
    if s.version == 6:
        ip, eth = struct.pack("!IHBB", 6 << 28, len(l4), proto, 64) + s.packed + d.packed, 0x86DD
    else:
        h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 0, 0, 64, proto, 0, s.packed, d.packed)
        ip, eth = h[:10] + struct.pack("!H", _csum(h)) + h[12:], 0x0800
    return b"\x02" * 6 + b"\x04" * 6 + struct.pack("!H", eth) + ip + l4


def traffic(seed: int = 7):
    """(time, frame) list: mixed TCP/UDP/ICMP, IPv4/IPv6, plus a port scan and a fan-in."""
    r = random.Random(seed)
    v4 = [f"10.0.{a}.{b}" for a in (0, 1) for b in (1, 2, 3, 5, 9, 17, 33, 200)] + [
        "192.0.2.10", "192.0.2.77", "198.51.100.5", "203.0.113.9", "8.8.8.8", "172.16.5.4"]
    v6 = ["2001:db8::1", "2001:db8::2", "2001:db8:0:1::10", "2001:db8:1::5", "fe80::1", "2a00:1450:4001::8e", "::1"]
    ports = [22, 25, 53, 80, 123, 443, 1023, 1024, 3389, 8080, 50000, 65535]
    flows = []
    for _ in range(160):
        fam = v6 if r.random() < 0.3 else v4
        s, d = r.sample(fam, 2)
        proto = r.choice([6, 6, 6, 17, 17, 1])
        if proto == 1 and fam is v6:
            proto = 58
        flows.append((s, d, proto, r.choice(ports + [r.randint(1025, 65535)]), r.choice(ports),
                      r.randint(1, 12), r.choice([40, 60, 100, 576, 1400, 1500])))
    flows += [("198.51.100.66", f"10.0.2.{k + 1}", 6, 40000 + k, 22, 1, 40) for k in range(40)]
    flows += [(f"203.0.113.{k + 10}", "10.0.0.80", 6, 33000 + k, 443, 3, 60) for k in range(30)]
    t, out = T0, []
    for s, d, proto, sp, dp, npk, size in flows:
        t += 0.37
        icmp = (r.choice([0, 3, 8, 11]), r.choice([0, 1, 3]))
        for j in range(npk):
            fl = 0
            if proto == 6:
                fl = 0x02 if j == 0 else (0x11 if j == npk - 1 else r.choice([0x10, 0x18]))
                if npk == 1 and r.random() < 0.3:
                    fl = 0x04
                if npk > 2 and r.random() < 0.1:
                    fl |= 0x20
            out.append((t + j * 0.013, _packet(s, d, proto, sp, dp, fl, size, icmp)))
    return sorted(out, key=lambda x: x[0])


def write_pcap(path: Path, packets) -> None:
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for t, p in packets:
            f.write(struct.pack("<IIII", int(t), int(round((t % 1) * 1e6)) % 1000000, len(p), len(p)) + p)


def make_nfcapd_file(workdir: Path, packets) -> Path:
    """pcap -> softflowd (IPFIX, ms timestamps) -> real nfcapd -> the rotated file."""
    pcap = workdir / "traffic.pcap"
    write_pcap(pcap, packets)

    def feed(port: int) -> None:
        ctl = workdir / "softflowd.ctl"
        sf = subprocess.Popen(["softflowd", "-r", str(pcap), "-n", f"127.0.0.1:{port}", "-v", "10", "-6",
                               "-A", "milli", "-d", "-c", str(ctl), "-p", str(workdir / "softflowd.pid")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        # softflowd 1.1.0 in -r mode blocks in accept() on its control socket between
        # batches of packets: a control command lets it go on until EOF and exit.
        deadline = time.time() + 30
        while sf.poll() is None and time.time() < deadline:
            time.sleep(0.2)
            if ctl.exists():
                subprocess.run(["softflowctl", "-c", str(ctl), "statistics"], capture_output=True, timeout=5)
        if sf.poll() is None:
            sf.kill()
            raise AssertionError("softflowd did not finish reading the pcap")
        time.sleep(0.5)

    return nfcapd_capture.capture(workdir / "spool", feed, settle=0.8)[0]


# ---- nfdump as the reference ----------------------------------------------------------
def nfdump(*args) -> str:
    res = subprocess.run(["nfdump", *args], capture_output=True, text=True)
    assert res.returncode == 0, f"nfdump {args}: {res.stderr}"
    return res.stdout


def nfdump_records(nf: Path, flt: str = "any") -> Counter:
    """Multiset of (src, dst, sport, dport, proto, packets, bytes) nfdump selects."""
    out = Counter()
    for line in nfdump("-r", str(nf), "-q", "-o", "csv", flt).splitlines():
        f = line.split(",")
        if len(f) < 13 or f[0] == "ts":
            continue
        out[(f[3], f[4], int(f[5]), int(f[6]), f[7], int(f[11]), int(f[12]))] += 1
    return out


def nfdump_flows(nf: Path) -> list[dict]:
    """Decode every flow with `nfdump -o json` into FLOWS_TABLE rows (one small helper,
    standing in for the ingest: same fields, ICMP type/code folded into dst_port)."""
    text, rows, dec, pos = nfdump("-r", str(nf), "-q", "-o", "json"), [], json.JSONDecoder(), 0
    while True:
        while pos < len(text) and text[pos] in " \n\t,[]":
            pos += 1
        if pos >= len(text):
            break
        rec, pos = dec.raw_decode(text, pos)
        ts = dt.datetime.fromisoformat(rec["first"]).replace(tzinfo=dt.timezone.utc)
        te = dt.datetime.fromisoformat(rec["last"]).replace(tzinfo=dt.timezone.utc)
        icmp = rec["proto"] in (1, 58)
        fl = rec.get("tcp_flags", "........")
        rows.append({
            "time_start": ts, "time_end": te, "exporter": rec.get("ip4_router") or rec.get("ip6_router"),
            "input_if": rec.get("input_snmp", 0), "output_if": rec.get("output_snmp", 0),
            "src_addr": rec.get("src4_addr") or rec.get("src6_addr"),
            "dst_addr": rec.get("dst4_addr") or rec.get("dst6_addr"),
            "src_port": 0 if icmp else rec.get("src_port", 0),
            "dst_port": rec.get("icmp_type", 0) * 256 + rec.get("icmp_code", 0) if icmp else rec.get("dst_port", 0),
            "proto": rec["proto"], "tcp_flags": sum(1 << (7 - i) for i, c in enumerate(fl) if c != "."),
            "tos": rec.get("src_tos", 0), "packets": rec["in_packets"], "bytes": rec["in_bytes"],
            "sampling_rate": 1, "src_as": rec.get("src_as", 0), "dst_as": rec.get("dst_as", 0),
            "src_vlan": rec.get("src_vlan", 0), "dst_vlan": rec.get("dst_vlan", 0),
            "source_file": nf.name, "file_seq": len(rows),
            "date": ts.strftime("%Y-%m-%d"), "hour": ts.hour,
        })
    return rows


PROTO_NAMES = {1: "ICMP", 6: "TCP", 17: "UDP", 58: "ICMP6"}


def spark_records(df) -> Counter:
    return Counter((r.src_addr, r.dst_addr, r.src_port, r.dst_port, PROTO_NAMES.get(r.proto, str(r.proto)),
                    r.packets, r.bytes)
                   for r in df.select("src_addr", "dst_addr", "src_port", "dst_port", "proto", "packets",
                                      "bytes").collect())


# ---- fixtures ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nf_file(tmp_path_factory) -> Path:
    for tool in ("nfcapd", "nfdump", "softflowd", "softflowctl"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: run `make setup`")
    return make_nfcapd_file(tmp_path_factory.mktemp("query-nf"), traffic())


@pytest.fixture(scope="module")
def flows(spark, nf_file):
    from flowlake.schemas import FLOWS_TABLE

    rows = nfdump_flows(nf_file)
    assert len(rows) > 200
    df = spark.createDataFrame(rows, FLOWS_TABLE.spark_schema()).cache()
    return df


@pytest.fixture(scope="module")
def lake(cfg, flows):
    """The same flows as the only days of lake/flows under FLOWLAKE_HOME, for the CLI. The
    session's lake may hold other modules' days (the Superset tests' demo lake): they are set
    aside for this module, whose answers are over the whole lake, and put back after."""
    base = Path(cfg.lake) / "flows"
    moved = []
    for table in ("flows", "reports"):  # reports too: new_talkers reads earlier days' daily_hosts
        here, aside = Path(cfg.lake) / table, Path(cfg.lake) / f".{table}-aside-test-query"
        shutil.rmtree(aside, ignore_errors=True)
        if here.exists():
            here.rename(aside)
            moved.append((here, aside))
    flows.write.mode("overwrite").partitionBy("date", "hour").parquet(str(base))
    yield base
    shutil.rmtree(base, ignore_errors=True)  # this module's day
    for here, aside in moved:
        shutil.rmtree(here, ignore_errors=True)  # its reports
        aside.rename(here)


ENGINE_NAMES = ["spark", "local"]


@pytest.fixture(scope="module")
def engines(cfg, lake):
    """Both query engines over the same lake partition."""
    from flowlake.jobs.query.duck import DuckEngine
    from flowlake.jobs.query.spark_engine import SparkEngine

    out = {"spark": SparkEngine(cfg), "local": DuckEngine(cfg)}
    yield out
    out["local"].close()


def duck_eval(rows: list[tuple], schema: str, exprs: list[str]) -> list[tuple]:
    """Evaluate SQL expressions over hand-made rows in DuckDB (the local engine's compiler)."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"CREATE TABLE t ({schema})")
    if rows:
        con.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(rows[0]))})", rows)
    return con.execute(f"SELECT {', '.join(exprs)} FROM t").fetchall()


# ---- the parser ---------------------------------------------------------------------------
@pytest.mark.parametrize("text,bad", [
    ("dst port foo", "foo"),
    ("src ip 10.0.0.300", "10.0.0.300"),
    ("proto tcp and blah", "blah"),
    ("proto ipv6-icmp", "ipv6-icmp"),
    ("flags SZ", "SZ"),
    ("port 70000", "70000"),
    ("net 10.0.0.0", "10.0.0.0"),
    ("proto tcp )", ")"),
    ("src net 10.0.0.0/33", "10.0.0.0/33"),
    ("bytes > 1x", "1x"),
])
def test_invalid_filters_point_at_the_token(text, bad):
    with pytest.raises(FilterError) as err:
        parse(text)
    msg = str(err.value)
    lines = msg.splitlines()
    assert lines[1].strip() == text.strip()
    caret = lines[2]
    col = caret.index("^")
    # the caret sits under the offending token (lines share the two-space indent)
    assert lines[1][col:col + len(bad)] == bad, msg
    assert bad in lines[0]


def test_truncated_filter_points_at_the_end():
    err = pytest.raises(FilterError, parse, "proto tcp and").value
    assert "ends too early" in str(err) and err.pos >= len("proto tcp")


def test_precedence_and_case():
    from flowlake.jobs.query import ast

    t = parse("PORT 53 AND proto tcp or proto udp")
    assert isinstance(t, ast.Or) and isinstance(t.items[0], ast.And)
    assert parse("not proto tcp and proto udp") == parse("(!proto tcp) && proto udp")
    assert parse("bytes > 1k") == ast.Cmp("bytes", ">", 1000)  # nfdump scales by 1000
    assert parse("flags SA") == ast.Flags(0x12)
    assert parse("") == ast.Any_() and parse("# just a comment") == ast.Any_()


_WORDS = ["src", "dst", "ip", "host", "net", "port", "proto", "tcp", "udp", "and", "or", "not", "!", "&&",
          "||", "(", ")", "[", "]", "in", "if", "as", "flags", "SA", "bytes", ">", "<=", "eq", "1k", "22",
          "10.0.0.1", "10.0.0.0/8", "2001:db8::/32", "::1", "any", ",", "255.0.0.0", "ipv6", "#", "\n"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_WORDS), max_size=12))
def test_fuzz_token_soup_only_raises_filter_error(words):
    try:
        parse(" ".join(words))
    except FilterError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_fuzz_random_text_only_raises_filter_error(text):
    try:
        parse(text)
    except FilterError as exc:
        assert str(exc)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fuzz_mutated_valid_filters_only_raise_filter_error(data):
    """Valid filters with characters deleted, duplicated or replaced: parse or a clean FilterError."""
    text = data.draw(st.sampled_from(FILTERS))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(text)))
        op = data.draw(st.sampled_from(["del", "dup", "put"]))
        ch = data.draw(st.sampled_from(list("()[]!&|<>=/:.,# aZ9")))
        text = text[:i] + text[i + 1:] if op == "del" else text[:i] + (text[i:i + 1] * 2 if op == "dup" else ch) + text[i:]
    try:
        parse(text)
    except FilterError as exc:
        assert exc.text == text and (exc.pos is None or 0 <= exc.pos <= len(text))


# ---- Spark compilation against nfdump -----------------------------------------------------
FILTERS = [
    "any",
    "proto tcp", "proto udp", "proto icmp", "proto 58", "proto icmp6", "not proto tcp",
    "src ip 10.0.0.1", "dst host 10.0.0.80", "ip 10.0.1.9", "ip 2001:db8::1", "ip 2001:db8:0:0::1",
    "src ip 198.51.100.66 and dst port 22",
    "net 10.0.0.0/24", "src net 10.0.0.0/16", "dst net 10.0.2.0/25", "net 10.0.0.0 255.255.255.0",
    "net 2001:db8::/31", "src net 2001:db8::/32", "net 2001:db8:0:1::/64", "dst net fe80::/10",
    "ip in [10.0.0.1 10.0.0.2]", "ip in [10.0.0.1,2001:db8::1]", "src ip in [10.0.0.0/24 2001:db8::/48]",
    "dst ip in [203.0.113.0/24, 10.0.0.80]",
    "port 22", "port 768", "dst port < 1024", "src port > 1023", "src port gt 1023", "dst port >= 50000",
    "port in [22 443]", "dst port in [22,443,8080]", "src port in [53]",
    "flags S", "flags SA", "flags S and not flags AFRPU", "not flags AFRPU", "flags R", "flags U", "flags APU",
    "bytes > 1k", "bytes >= 1k", "bytes 1000", "bytes eq 40", "bytes < 100", "packets < 2", "packets >= 10",
    "duration 0", "duration > 50", "duration <= 13",
    "bpp > 500", "bps > 100k", "pps > 50",
    "tos 0", "in if 0", "out if 3", "if 0",
    "ipv4", "ipv6", "inet6 and proto udp",
    "not (proto tcp or proto udp)", "!proto tcp && port 53", "proto tcp || proto udp and port 53",
    "port 53 and proto tcp or proto udp", "(src net 10.0.0.0/8 or src net 2001:db8::/32) and not dst port 22",
    "router ip 127.0.0.1",
]


KEYS = ["src_addr", "dst_addr", "src_port", "dst_port", "proto", "packets", "bytes"]


def filter_matrix(engine: str, flows, cfg) -> list[dict]:
    """Every flow of the lake with one boolean per FILTERS entry (f0, f1, ...), evaluated in
    one pass by the engine's compiler: Spark columns, or DuckDB SQL over the lake's files."""
    if engine == "spark":
        from flowlake.jobs.query import to_column

        cols = [to_column(parse(f)).alias(f"f{i}") for i, f in enumerate(FILTERS)]
        return [r.asDict() for r in flows.select("source_file", "file_seq", *KEYS, *cols).collect()]
    import duckdb

    from flowlake.pipelines.duck import sql_list
    from flowlake.jobs.query import sql
    from flowlake.jobs.query.duck import DuckEngine

    files = DuckEngine(cfg)._files()
    cols = ", ".join(f"{sql.to_sql(parse(f))} AS f{i}" for i, f in enumerate(FILTERS))
    cur = duckdb.connect().execute(f"SELECT source_file, file_seq, {', '.join(KEYS)}, {cols} "
                                   f"FROM read_parquet({sql_list(files)})")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _key(r) -> tuple:
    return (r["src_addr"], r["dst_addr"], r["src_port"], r["dst_port"], PROTO_NAMES.get(r["proto"], str(r["proto"])),
            r["packets"], r["bytes"])


@pytest.mark.integration
@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_filters_match_nfdump(engine, flows, lake, cfg, nf_file):
    assert len(FILTERS) >= 25
    total = nfdump_records(nf_file)
    rows = filter_matrix(engine, flows, cfg)
    assert Counter(_key(r) for r in rows) == total
    checked = 0
    for i, flt in enumerate(FILTERS):
        want = nfdump_records(nf_file, flt)
        got = Counter(_key(r) for r in rows if r[f"f{i}"])
        assert got == want, f"filter {flt!r}: {engine} {sum(got.values())} records, nfdump {sum(want.values())}; " \
                            f"only {engine}: {list((got - want))[:3]} only nfdump: {list((want - got))[:3]}"
        checked += 0 < len(want) < len(total)  # the filter really selects
    assert checked >= 40


@pytest.mark.integration
def test_filter_compilers_equal_row_for_row(flows, lake, cfg):
    """The Spark and DuckDB compilations of every filter decide alike on every flow."""
    by_engine = {e: {(r["source_file"], r["file_seq"]): r for r in filter_matrix(e, flows, cfg)} for e in ENGINE_NAMES}
    assert by_engine["spark"] == by_engine["local"]
    assert len(by_engine["local"]) > 200


@pytest.mark.integration
def test_as_filters_on_hand_made_rows(spark):
    """nfdump 1.7.1 refuses `as` filters without a geo DB, so AS semantics are checked here."""
    from flowlake.jobs.query import to_column

    df = spark.createDataFrame([(1, 3320, 15169), (2, 0, 3320), (3, 64512, 64513)], "id int, src_as long, dst_as long")

    def ids(flt):
        return sorted(r.id for r in df.where(to_column(parse(flt))).collect())

    def duck_ids(flt):
        from flowlake.jobs.query.sql import to_sql

        rows = duck_eval([(1, 3320, 15169), (2, 0, 3320), (3, 64512, 64513)], "id int, src_as bigint, dst_as bigint",
                         ["id", to_sql(parse(flt))])
        return sorted(i for i, hit in rows if hit)

    for check in (ids, duck_ids):
        assert check("as 3320") == [1, 2]
        assert check("src as 3320") == [1]
        assert check("dst as > 60000") == [3]
        assert check("as in [15169 64513]") == [1, 3]
        assert check("not src as in [0]") == [1, 3]


@pytest.mark.integration
def test_flags_semantics_on_non_tcp(spark):
    """nfdump 1.7.1, measured by bench/query.py on flows with random flags on every protocol:
    `flags S` never matches non-TCP; `not flags AS` = not TCP, or TCP with neither A nor S."""
    from flowlake.jobs.query import to_column

    df = spark.createDataFrame([(1, 6, 0x12), (2, 6, 0x02), (3, 6, 0x01), (4, 17, 0x12), (5, 17, 0)],
                               "id int, proto int, tcp_flags int")

    def ids(flt):
        return sorted(r.id for r in df.where(to_column(parse(flt))).collect())

    def duck_ids(flt):
        from flowlake.jobs.query.sql import to_sql

        rows = duck_eval([(1, 6, 0x12), (2, 6, 0x02), (3, 6, 0x01), (4, 17, 0x12), (5, 17, 0)],
                         "id int, proto int, tcp_flags int", ["id", to_sql(parse(flt))])
        return sorted(i for i, hit in rows if hit)

    for check in (ids, duck_ids):
        assert check("flags S") == [1, 2]
        assert check("flags SA") == [1]
        assert check("not flags AS") == [3, 4, 5]
        assert check("flags S and not flags A") == [2]


@pytest.mark.integration
def test_ipv4_nets_by_text_prefix(spark):
    import ipaddress

    from pyspark.sql import functions as F

    from flowlake.jobs.query.compiler import ipv4_in_net

    addrs = ["10.1.2.3", "10.1.255.255", "10.10.2.3", "110.1.2.3", "192.0.2.127", "192.0.2.128", "2001:db8::1",
             "0.0.0.0", "255.255.255.255", "10.15.3.4", "10.16.0.1", "192.0.2.20", "192.0.2.32", "192.0.2.2"]
    # every form of the DuckDB text: whole octets, a partial last octet (address list), a
    # partial inner octet of 2-16 values (prefix list), and of more (the octet cast)
    nets = ["10.1.0.0/16", "192.0.2.0/25", "10.0.0.0/7", "0.0.0.0/0", "192.0.2.128/32", "10.1.2.0/23",
            "10.0.0.0/12", "192.0.2.16/28", "10.0.0.0/9"]
    df = spark.createDataFrame([(a,) for a in addrs], "a string")
    row = df.select(*[F.collect_list(F.when(ipv4_in_net(F.col("a"), ipaddress.ip_network(n)), F.col("a"))).alias(f"n{i}")
                      for i, n in enumerate(nets)]).first()
    from flowlake.jobs.query import sql

    duck = duck_eval([(a,) for a in addrs], "a varchar",
                     ["a"] + [sql.ipv4_in_net("a", ipaddress.ip_network(n)) for n in nets])
    for i, n in enumerate(nets):
        net = ipaddress.ip_network(n)
        want = [a for a in addrs if ":" not in a and ipaddress.ip_address(a) in net]
        assert sorted(row[f"n{i}"]) == sorted(want), n
        assert sorted(r[0] for r in duck if r[i + 1]) == sorted(want), n


@pytest.mark.integration
def test_ipv6_expansion_matches_python(spark):
    import ipaddress

    from pyspark.sql import functions as F

    from flowlake.jobs.query.compiler import ipv6_hex

    addrs = ["::", "::1", "2001:db8::", "fe80::1:2", "2001:db8:0:1:0:0:0:10", "1:2:3:4:5:6:7:8", "abcd::ef:0"]
    got = dict(spark.createDataFrame([(a,) for a in addrs], "a string")
               .select("a", ipv6_hex(F.col("a")).alias("h")).collect())
    assert got == {a: f"{int(ipaddress.ip_address(a)):032x}" for a in addrs}
    from flowlake.jobs.query import sql

    duck = dict(duck_eval([(a,) for a in addrs + ["10.0.0.1"]], "a varchar", ["a", sql.ipv6_hex("a")]))
    assert duck == {**got, "10.0.0.1": None}


# ---- statistics against nfdump -s ---------------------------------------------------------
def nfdump_stats(nf: Path, spec: str, flt: str = "any") -> list[tuple]:
    """(val, flows, packets, bytes, flows%) rows of `nfdump -s spec -n 0 -o csv`, in nfdump's order."""
    out = []
    for line in nfdump("-r", str(nf), "-q", "-s", spec, "-n", "0", "-o", "csv", flt).splitlines():
        f = line.split(",")
        if len(f) < 14 or f[0] == "ts":
            continue
        out.append((f[4], int(f[5]), int(f[7]), int(f[9]), float(f[6])))
    return out


def _nfdump_ip_text(val: str) -> str:
    """nfdump -s prints IPv6 addresses whose upper 96 bits are zero (::1) as IPv4 (0.0.0.1)."""
    import ipaddress

    if ":" in val and int(ipaddress.ip_address(val)) < 2**32:
        return str(ipaddress.ip_address(int(ipaddress.ip_address(val))))
    return val


STATS = [("srcip/bytes", "any"), ("dstip/flows", "any"), ("ip/packets", "proto tcp"), ("srcport/flows", "any"),
         ("dstport/bytes", "not proto tcp"), ("port/flows", "any"), ("proto/packets", "any"),
         ("dstip/bpp", "ipv6"), ("srcip/flows", "dst port 22")]


@pytest.mark.integration
@pytest.mark.parametrize("engine", ENGINE_NAMES)
@pytest.mark.parametrize("spec,flt", STATS)
def test_stats_match_nfdump(engines, nf_file, engine, spec, flt):
    from flowlake.jobs.query.stats import parse_stat

    want = nfdump_stats(nf_file, spec, flt)
    key, order = parse_stat(spec)
    got = [(_nfdump_ip_text(r["val"]), r["flows"], r["packets"], r["bytes"], r["flows_pct"])
           for r in engines[engine].top(parse(flt), key, order, 0)]
    assert sorted(g[:4] for g in got) == sorted(w[:4] for w in want), spec
    # same order values rank for rank (ties may be listed in another order)
    idx = {"flows": 1, "packets": 2, "bytes": 3}.get(order)
    if idx:
        assert [g[idx] for g in got] == [w[idx] for w in want]
    assert {g[0]: g[4] for g in got} == pytest.approx({w[0]: w[4] for w in want}, abs=0.051)


@pytest.mark.integration
@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_aggregate_matches_nfdump_A(engines, nf_file, engine):
    want = Counter()
    for line in nfdump("-r", str(nf_file), "-q", "-A", "srcip,dstport", "-o", "csv").splitlines():
        f = line.split(",")
        if len(f) > 12 and f[0] != "ts":
            want[(f[3], int(f[6]))] = (int(f[11]), int(f[12]))
    got = {(r["srcip"], r["dstport"]): (r["packets"], r["bytes"])
           for r in engines[engine].aggregate(parse("any"), ["srcip", "dstport"])}
    assert got == dict(want)


@pytest.mark.integration
def test_engines_equal_row_for_row(engines):
    """DuckDB and Spark answer every operation with the same rows, in the same order:
    records (all columns), every statistic and order (shares, rates, times), aggregates
    with a limit, several statistics at once, host profiles, time windows."""
    import datetime as dt

    spark, duck = engines["spark"], engines["local"]
    # every statistic shape and order once (Spark actions are costly: the filters take turns)
    stats = {"any": [("srcip", "bytes"), ("ip", "flows"), ("record", "bytes")],
             "ipv6 and bytes > 100": [("port", "packets"), ("dstport", "bps"), ("router", "flows")],
             "not flags AFRPU": [("proto", "pps"), ("dstip", "bpp")]}
    for flt, keys in stats.items():
        tree = parse(flt)
        rec = list(spark.records(tree))
        assert list(duck.records(tree)) == rec, flt
        assert list(duck.records(tree, 7)) == rec[:7], flt
        for key, order in keys:
            assert duck.top(tree, key, order, 0) == spark.top(tree, key, order, 0), (flt, key, order)
    assert duck.aggregate(parse("proto tcp"), ["srcip", "dstport"], "bytes", 5) == spark.aggregate(
        parse("proto tcp"), ["srcip", "dstport"], "bytes", 5)
    specs = [("srcip", "bytes"), ("dstport", "flows"), ("ip", "packets")]
    assert duck.tops(parse("proto udp"), specs, 3) == spark.tops(parse("proto udp"), specs, 3)
    for address in ("198.51.100.66", "2001:db8::1"):
        assert duck.host(address, 5) == spark.host(address, 5), address
    assert duck.host("192.0.2.99", 5)["flows"] == 0 == spark.host("192.0.2.99", 5)["flows"]
    # a time window: the same flows on both engines, and only those inside it
    from flowlake.base import config
    from flowlake.jobs.query.duck import DuckEngine
    from flowlake.jobs.query.spark_engine import SparkEngine

    lo, hi = dt.datetime(2026, 11, 25, 10, 0, 30, tzinfo=dt.timezone.utc), dt.datetime(2026, 11, 25, 10, 1, tzinfo=dt.timezone.utc)
    d, s = DuckEngine(config.get(), lo, hi), SparkEngine(config.get(), lo, hi)
    rows = list(d.records(parse("any")))
    assert rows == list(s.records(parse("any"))) and rows
    assert all(lo.replace(tzinfo=None) <= r["time_start"] < hi.replace(tzinfo=None) for r in rows)
    assert d.top(parse("any"), "srcip", "bytes", 0) == s.top(parse("any"), "srcip", "bytes", 0)
    d.close()


# ---- the CLI over a real lake partition ----------------------------------------------------
def _cli(*args):
    from flowlake.cli import main

    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return res


@pytest.fixture(params=ENGINE_NAMES)
def engine_env(request, monkeypatch, cfg):
    """Run the CLI on each engine, chosen by the config's environment override."""
    from flowlake.base import config

    monkeypatch.setenv("FLOWLAKE_QUERY_ENGINE", request.param)
    config.reset()
    yield request.param
    monkeypatch.delenv("FLOWLAKE_QUERY_ENGINE")
    config.reset()


@pytest.mark.integration
def test_cli_query_json_equals_nfdump(lake, nf_file, engine_env):
    res = _cli("query", "proto tcp and dst port 22", "--format", "json", "--limit", "0")
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    want = nfdump_records(nf_file, "proto tcp and dst port 22")
    assert Counter((r["src_addr"], r["dst_addr"], r["src_port"], r["dst_port"], "TCP", r["packets"], r["bytes"])
                   for r in got) == want
    assert got[0]["time_start"].endswith("Z")
    # --limit caps, --from/--to prune
    assert len(json.loads(_cli("query", "any", "--format", "json", "--limit", "5").stdout)) == 5
    res = _cli("query", "any", "--format", "json", "--limit", "0", "--from", "2026-11-25T10:00:30",
               "--to", "2026-11-25T10:01:00")
    rows = json.loads(res.stdout)
    assert rows and all("2026-11-25T10:00:30" <= r["time_start"] < "2026-11-25T10:01:00" for r in rows)
    assert len(json.loads(_cli("query", "any", "--format", "json", "--from", "2026-11-26").stdout)) == 0


@pytest.mark.integration
def test_cli_stats_and_errors(lake, nf_file, engine_env):
    res = _cli("query", "any", "--stats", "srcip/bytes", "-n", "3", "--format", "json")
    assert res.exit_code == 0, res.output
    top3 = json.loads(res.stdout)["srcip/bytes"]
    assert [(r["val"], r["bytes"]) for r in top3] == [(w[0], w[3]) for w in nfdump_stats(nf_file, "srcip/bytes")[:3]]
    bad = _cli("query", "dst port foo")
    assert bad.exit_code == 2 and "^^^" in bad.output and "foo" in bad.output
    bad = _cli("query", "any", "--from", "yesterday-ish")
    assert bad.exit_code == 2 and "yesterday-ish" in bad.output
    bad = _cli("query", "any", "--stats", "srcip/nonsense")
    assert bad.exit_code == 2 and "nonsense" in bad.output


@pytest.mark.integration
def test_cli_aggregate_csv(lake, nf_file, engine_env):
    import csv
    import io

    res = _cli("query", "proto udp", "-A", "srcip,dstport", "--format", "csv")
    assert res.exit_code == 0, res.output
    got = {(r["srcip"], int(r["dstport"])): int(r["bytes"]) for r in csv.DictReader(io.StringIO(res.stdout))}
    want = Counter()
    for k in nfdump_records(nf_file, "proto udp").elements():
        want[(k[0], k[3])] += k[6]
    assert got == dict(want)


@pytest.mark.integration
def test_cli_host_profile(lake, nf_file, engine_env):
    res = _cli("host", "198.51.100.66", "--format", "json")
    assert res.exit_code == 0, res.output
    prof = json.loads(res.stdout)
    want = nfdump_records(nf_file, "ip 198.51.100.66")
    assert prof["flows"] == sum(want.values()) == 40
    assert prof["peers"] == 40 and prof["bytes_out"] == sum(k[6] for k in want.elements())
    assert prof["top_ports"][0]["port"] == 22 and prof["top_ports"][0]["role"] == "out"
    assert sum(h["flows"] for h in prof["hourly"]) == 40
    assert _cli("host", "not-an-ip").exit_code == 2


def test_engine_choice_in_one_place(tmp_path):
    from flowlake.base import config
    from flowlake.jobs.query.engines import choose, show_progress

    def cfg(**env):
        return config.load(env={"FLOWLAKE_HOME": str(tmp_path / "home"), **env})

    assert choose(cfg()) == "local"  # the default: auto, Spark in local mode
    assert choose(cfg(FLOWLAKE_QUERY_ENGINE="spark")) == "spark"
    assert choose(cfg(), override="spark") == "spark" and choose(cfg(), master="local[1]") == "spark"
    # auto on a Spark cluster: Spark when the lake is not on this machine, DuckDB when it is
    cluster = cfg(FLOWLAKE_SPARK_MASTER="spark://10.0.0.5:7077")
    assert choose(cluster) == "spark"
    (tmp_path / "home" / "lake").mkdir(parents=True)
    assert choose(cluster) == "local"
    with pytest.raises(ValueError, match="query engine 'postgres': must be one of auto, local, spark"):
        choose(cfg(FLOWLAKE_QUERY_ENGINE="postgres"))

    class Tty:
        def __init__(self, tty):
            self.tty = tty

        def isatty(self):
            return self.tty

    assert show_progress(cfg(), None, Tty(True)) and not show_progress(cfg(), None, Tty(False))
    assert show_progress(cfg(FLOWLAKE_QUERY_PROGRESS="always"), None, Tty(False))
    assert not show_progress(cfg(FLOWLAKE_QUERY_PROGRESS="never"), None, Tty(True))
    assert show_progress(cfg(), True, Tty(False)) and not show_progress(cfg(), False, Tty(True))


def test_duckdb_threads_every_core_unless_oversubscribed():
    from flowlake.jobs.query.engines import duck_threads

    assert duck_threads(3, cores=2, load=9.0) == 3  # [query] threads set: as set
    assert duck_threads(0, cores=2, load=0.2) == 2  # idle machine: every core
    assert duck_threads(0, cores=8, load=3.4) == 8  # the analyst's own commands in the load: every core
    assert duck_threads(0, cores=2, load=3.9) == 2
    assert duck_threads(0, cores=2, load=14.0) == 1  # loaded: one thread, never none
    assert 1 <= duck_threads(0) <= (os.cpu_count() or 1)


def test_local_engine_names_an_unreadable_file(tmp_path, monkeypatch):
    from flowlake.base import config

    part = tmp_path / "lake" / "flows" / "date=2026-11-20" / "hour=01"
    part.mkdir(parents=True)
    (part / "x.parquet").write_text("not parquet")
    monkeypatch.setenv("FLOWLAKE_HOME", str(tmp_path))
    monkeypatch.setenv("FLOWLAKE_QUERY_ENGINE", "local")
    config.reset()
    try:
        for args in (["query", "any", "-s", "srcip/bytes"], ["query", "proto udp", "--from", "2026-11-20"],
                     ["host", "10.0.0.1"]):
            res = _cli(*args)
            assert res.exit_code == 1 and "cannot read the lake" in res.stderr and str(part / "x.parquet") in res.stderr
            assert "Traceback" not in res.output
        monkeypatch.setenv("FLOWLAKE_HOME", str(tmp_path / "empty"))
        config.reset()
        res = _cli("query", "any")
        assert res.exit_code == 1 and "no flows in the lake" in res.stderr
    finally:
        monkeypatch.undo()
        config.reset()


@pytest.mark.integration
def test_progress_goes_to_stderr_only(lake, nf_file):
    """--progress draws on stderr; stdout stays the clean JSON a pipe expects."""
    # every observation (`all`): the listing walks the window hour by hour, and says so
    res = _cli("query", "any", "--format", "json", "--limit", "0", "--progress", "--count-at", "all")
    assert res.exit_code == 0, res.stderr
    assert len(json.loads(res.stdout)) == sum(nfdump_records(nf_file).values())
    assert "reading date=2026-11-25/hour=10" in res.stderr
    # counted once (the default rule): one pass over the window; one exporter, so nfdump's records
    once = _cli("query", "any", "--format", "json", "--limit", "0", "--progress")
    assert once.exit_code == 0, once.stderr
    assert len(json.loads(once.stdout)) == sum(nfdump_records(nf_file).values())
    quiet = _cli("query", "any", "--format", "json", "--limit", "3")
    # no progress: only the counting rule's line (issue 34), named from the config
    assert quiet.stderr.startswith("counted with [query] count_at = ") and quiet.stderr.count("\n") == 1, quiet.stderr
    assert len(json.loads(quiet.stdout)) == 3


@pytest.mark.integration
def test_local_engine_whole_command_never_loads_spark(lake, nf_file, cfg):
    """The real `flowlake` command, piped: the answer of nfdump -s, no progress on a pipe,
    and neither Spark, pandas nor pyarrow imported (they cost more than the whole query)."""
    import os
    import sys

    # the answer ends the process with os._exit (no interpreter teardown): report from there
    probe = ("import os, sys\nend = os._exit\n"
             "def loaded(code):\n"
             "    print(sorted(m for m in ('pyspark', 'pandas', 'pyarrow', 'rich') if m in sys.modules), file=sys.stderr)\n"
             "    sys.stderr.flush()\n    end(code)\n"
             "os._exit = loaded\nfrom flowlake.cli import run\nrun()")
    res = subprocess.run([sys.executable, "-c", probe, "query", "proto tcp", "-s", "dstport/flows", "-n", "3",
                          "--format", "csv"], capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip().splitlines()[-1] == "[]", res.stderr
    got = [(r.split(",")[1], int(r.split(",")[2])) for r in res.stdout.splitlines()[1:]]
    want = nfdump_stats(nf_file, "dstport/flows", "proto tcp")
    assert [g[1] for g in got] == [w[1] for w in want[:3]]  # ties may list in another order
    assert all((val, flows) in [(w[0], w[1]) for w in want] for val, flows in got)


@pytest.mark.integration
def test_status_shows_the_query_engine(lake, cfg):
    from flowlake.stack import status_dict

    files = [f for f in lake.rglob("*.parquet")]
    st = status_dict(cfg)["query"]
    assert st["engine"] == "local" and st["hours"] == len({f.parent for f in files}) >= 1
    assert st["files"] == len(files) and st["max_files_per_hour"] >= 1
    assert 1 <= st["threads"] <= (os.cpu_count() or 1)  # what a query would use now ([query] threads = 0)


@pytest.mark.integration
def test_query_index_answers_as_the_lake(lake, cfg, nf_file):
    """Indexed hours answer exactly as their Parquet files; a rewritten hour is read from
    Parquet until reindexed; days past [query] index_days are dropped."""
    import os
    import shutil

    from flowlake.jobs.query import index
    from flowlake.jobs.query.duck import DuckEngine

    after = dt.datetime(2026, 11, 26, 12, tzinfo=dt.timezone.utc)  # the test day's hour is closed by then
    res = index.build(cfg, now=after)
    try:
        assert res["built"] == 1 and res["flows"] == len(nfdump_flows(nf_file))
        duck = DuckEngine(cfg)
        assert all(ix is not None for _, _, ix in duck.parts)
        plain = DuckEngine(cfg, use_index=False)  # Parquet, held equal to Spark by the test above
        for flt in ("any", "src net 10.0.0.0/16 and not proto tcp", "ipv6"):
            tree = parse(flt)
            assert list(duck.records(tree)) == list(plain.records(tree)), flt
            assert duck.top(tree, "ip", "bytes", 0) == plain.top(tree, "ip", "bytes", 0), flt
        assert duck.host("198.51.100.66", 5) == plain.host("198.51.100.66", 5)
        duck.close()
        assert index.build(cfg, now=after) == {"built": 0, "fresh": 1, "removed": 0, "flows": 0}
        # the hour is rewritten (a file's mtime changes): Parquet answers until the next build
        f = next(lake.rglob("*.parquet"))
        st = f.stat()
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        stale = DuckEngine(cfg)
        assert all(ix is None for _, _, ix in stale.parts)
        assert list(stale.records(parse("proto udp"))) == list(plain.records(parse("proto udp")))
        stale.close()
        plain.close()
        assert index.build(cfg, now=after)["built"] == 1 and len(list(index.root(cfg).rglob("*.duckdb"))) == 1
        # the bound: ten days later the day is past index_days and its file goes
        assert index.build(cfg, now=after + dt.timedelta(days=10))["removed"] == 1
        assert not list(index.root(cfg).rglob("*.duckdb"))
        res = _cli("query-index")
        assert res.exit_code == 0 and "query index: " in res.stdout, res.output
    finally:
        shutil.rmtree(index.root(cfg), ignore_errors=True)


# ---- daily security tables ----------------------------------------------------------------
def _flow(src, dst, dport=80, packets=1, bytes_=40, t=0, proto=6):
    ts = dt.datetime(2026, 11, 25, 10, 0, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=t)
    return {"time_start": ts, "time_end": ts + dt.timedelta(milliseconds=5), "exporter": "192.0.2.1",
            "input_if": 1, "output_if": 2, "src_addr": src, "dst_addr": dst, "src_port": 40000 + t % 1000,
            "dst_port": dport, "proto": proto, "tcp_flags": 2, "tos": 0, "packets": packets, "bytes": bytes_,
            "sampling_rate": 1, "src_as": 0, "dst_as": 0, "source_file": "x", "file_seq": t,
            "date": ts.strftime("%Y-%m-%d"), "hour": ts.hour}


def _frame(spark, rows):
    from flowlake.schemas import FLOWS_TABLE

    return spark.createDataFrame(rows, FLOWS_TABLE.spark_schema())


@pytest.mark.integration
def test_find_scanners_hand_made(spark):
    from flowlake.jobs.scanners import find_scanners

    rows = [_flow("203.0.113.5", f"10.0.0.{i}", 22, t=i) for i in range(25)]                 # horizontal
    rows += [_flow("203.0.113.6", "10.0.0.1", p, t=100 + p) for p in range(1, 31)]          # vertical
    rows += [_flow("203.0.113.7", f"10.0.0.{i}", 443, packets=50, bytes_=60000, t=200 + i) for i in range(30)]  # busy client, not a scan
    rows += [_flow("203.0.113.8", f"10.0.0.{i}", 22, t=300 + i) for i in range(19)]         # just under threshold
    out = {r.src_addr: r for r in find_scanners(_frame(spark, rows), 3, 20, 20, 0.8, 5).collect()}
    assert set(out) == {"203.0.113.5", "203.0.113.6"}
    h, v = out["203.0.113.5"], out["203.0.113.6"]
    assert (h.kind, h.distinct_destinations, h.probe_flows, h.top_port) == ("horizontal", 25, 25, 22)
    assert h.sample_targets.count(",") == 4 and h.first_seen < h.last_seen
    assert (v.kind, v.max_ports_per_destination, v.sample_ports) == ("vertical", 30, "1,2,3,4,5")


@pytest.mark.integration
def test_find_fan_in_robust_z(spark):
    import numpy as np

    from flowlake.jobs.fan_in import find_fan_in

    rows, t = [], 0
    counts = {f"10.0.1.{d}": 1 + d % 3 for d in range(40)}  # ordinary destinations: 1-3 sources
    counts["10.0.0.80"] = 60
    for dst, n in counts.items():
        for s in range(n):
            rows.append(_flow(f"198.18.{s // 200}.{s % 200}", dst, 443, t=t))
            t += 1
    out = find_fan_in(_frame(spark, rows), 10, 3.5, 3).collect()
    assert [r.dst_addr for r in out] == ["10.0.0.80"]
    x = np.array(list(counts.values()), dtype=float)
    med = np.median(x)
    mad = np.median(np.abs(x - med))
    assert out[0].robust_z == pytest.approx((60 - med) / (1.4826 * mad))
    assert out[0].sources == 60 and out[0].sample_sources.count(",") == 2


@pytest.mark.integration
def test_new_talkers_against_history(spark):
    from flowlake.jobs.new_talkers import daily_hosts, new_talkers

    old = _frame(spark, [_flow("10.0.0.1", "10.0.0.2"), _flow("10.0.0.3", "10.0.0.1")])
    today = _frame(spark, [_flow("10.0.0.1", "10.0.0.2"), _flow("10.0.0.9", "10.0.0.1"),
                           _flow("10.0.0.1", "10.0.0.9", t=5), _flow("10.0.0.1", "2001:db8::7", t=6)])
    hist = daily_hosts(old)
    assert sorted(r.address for r in hist.collect()) == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    out = {r.address: r for r in new_talkers(today, hist, 1).collect()}
    assert set(out) == {"10.0.0.9", "2001:db8::7"}
    assert (out["10.0.0.9"].role, out["10.0.0.9"].flows, out["10.0.0.9"].peers) == ("both", 2, 1)
    assert out["2001:db8::7"].role == "dst" and out["2001:db8::7"].history_days == 1


@pytest.mark.integration
def test_security_jobs_run_on_the_lake(lake, cfg):
    """The runner runs the three jobs over the nfcapd-derived lake; the planted scan and fan-in show up."""
    import pyarrow.parquet as pq

    res = _cli("jobs", "run", "--no-warm", "--date", DAY.isoformat(), "--job", "scanners", "--job", "fan_in",
               "--job", "new_talkers")
    assert res.exit_code == 0, res.output
    rep = Path(cfg.lake) / "reports"

    def table(name):
        return pq.read_table(rep / name / f"date={DAY.isoformat()}").to_pylist()

    scans = table("scanners")
    assert [r["src_addr"] for r in scans] == ["198.51.100.66"]
    assert scans[0]["distinct_destinations"] == 40 and scans[0]["top_port"] == 22
    fan = table("fan_in")
    assert "10.0.0.80" in [r["dst_addr"] for r in fan]
    assert next(r for r in fan if r["dst_addr"] == "10.0.0.80")["sources"] == 30
    new = table("new_talkers")  # no history: everything is new, and says so
    hosts = table("daily_hosts")
    assert len(new) == len(hosts) > 50 and all(r["history_days"] == 0 for r in new)
