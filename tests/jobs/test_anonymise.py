"""flowlake's Crypto-PAn against nfdump's own `nfanon` on a real nfcapd file (IPv4 and IPv6).

softflowd exports a written pcap (half IPv6) to a real nfcapd; nfanon anonymises the file
with a key; flowlake anonymises the original addresses with the same key, and every
address is compared with nfanon's, record by record (and IPv4 with yacryptopan too).
The same file's flows, put in a lake, go through `flowlake anonymise` and `flowlake query
--anonymise` as a user runs them.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import pcapgen  # noqa: E402
from conftest import run  # noqa: E402
from test_shipper import collect, nfdump_pipe  # noqa: E402  (real nfcapd files, nfdump -o pipe)

from flowlake.jobs.anonymise import CryptoPAn, KeyError_, parse_key  # noqa: E402

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
FLOWLAKE = str(REPO / ".venv" / "bin" / "flowlake")
KEY = "flowlake-test-key-32-characters!"
DAY = "2026-11-20"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("anon")
    pcap = d / "mixed.pcap"
    pcapgen.write_pcap(pcap, 300, seed=24, ipv6_share=0.5)
    original = collect(d / "spool", [(pcap, 10)])
    anonymised = d / "nfanon.out"
    run(["nfanon", "-K", KEY, "-r", str(original), "-w", str(anonymised)])
    return nfdump_pipe(original), nfdump_pipe(anonymised)


def test_every_address_equals_nfanon_ipv4_and_ipv6(files):
    orig, anon = files
    assert len(orig) == len(anon) == 300
    fams = {ipaddress.ip_address(r["src_addr"]).version for r in orig}
    assert fams == {4, 6}
    cp = CryptoPAn(KEY.encode())
    mapping = cp.strings([r[c] for r in orig for c in ("src_addr", "dst_addr")])
    v6_dst = 0
    for o, a in zip(orig, anon):
        assert (o["src_port"], o["dst_port"], o["bytes"]) == (a["src_port"], a["dst_port"], a["bytes"])
        assert mapping[o["src_addr"]] == a["src_addr"], o
        if ipaddress.ip_address(o["dst_addr"]).version == 4:
            assert mapping[o["dst_addr"]] == a["dst_addr"], o
        else:
            # nfanon 1.7.1 writes anonymise(anonymise(src)) as the IPv6 destination (it passes
            # the already anonymised source); the function is the same, the argument is not.
            assert cp.one(mapping[o["src_addr"]]) == a["dst_addr"], o
            assert mapping[o["dst_addr"]] != a["dst_addr"]
            v6_dst += 1
    assert v6_dst > 50


def test_ipv4_matches_yacryptopan_and_keeps_prefixes(files):
    from yacryptopan import CryptoPAn as Reference

    ref, cp = Reference(KEY.encode()), CryptoPAn(KEY.encode())
    addrs = sorted({r[c] for r in files[0] for c in ("src_addr", "dst_addr") if "." in r[c]})
    addrs += ["0.0.0.0", "255.255.255.255", "10.0.0.1", "10.0.0.2", "10.255.0.1"]
    mapping = cp.strings(addrs)
    assert all(mapping[a] == ref.anonymize(a) for a in addrs)

    def common(x, y):
        return 32 - (int(ipaddress.IPv4Address(x)) ^ int(ipaddress.IPv4Address(y))).bit_length()

    for x, y in zip(addrs, addrs[1:]):
        assert common(x, y) == common(mapping[x], mapping[y])


def test_key_forms_and_errors(tmp_path):
    assert parse_key(KEY, "k") == KEY.encode()
    assert parse_key("0x" + "ab" * 32, "k") == bytes([0xAB]) * 32
    with pytest.raises(KeyError_, match="k.txt: a Crypto-PAn key is 32 characters"):
        parse_key("short", "k.txt")
    hexkey = "0x" + KEY.encode().hex()  # the hex form nfanon takes gives the same pseudonyms
    assert CryptoPAn(parse_key(hexkey, "k")).one("192.0.2.1") == CryptoPAn(KEY.encode()).one("192.0.2.1")
    env = {k: v for k, v in os.environ.items() if k != "FLOWLAKE_ANON_KEY"}
    res = run([FLOWLAKE, "anonymise", "--help"], env=env)
    assert "--key-file" in res.stdout and "secret" in res.stdout
    bad = tmp_path / "bad.key"
    bad.write_text("too short\n")
    for args in (["--key-file", str(bad)], []):
        out = subprocess.run([FLOWLAKE, "anonymise", "--date", DAY, "--out", str(tmp_path / "o"), *args],
                             capture_output=True, text=True, env=env)
        assert out.returncode == 2
        assert ("bad.key: a Crypto-PAn key is 32 characters" if args else "no anonymisation key") in out.stderr


def lake_from(rows, lake: Path) -> None:
    """The nfcapd file's flows as a lake day (FLOWS_TABLE types, date/hour partitions), by DuckDB."""
    import duckdb

    from flowlake.schemas import FLOW, FLOWS_TABLE
    from flowlake.schemas.enrich import ENRICHMENT_NAMES

    # the wire columns only, as a lake day from before enrichment (readers take both)
    cols = [c for c in FLOWS_TABLE.sql_columns() if c[0] not in ENRICHMENT_NAMES]
    con = duckdb.connect()
    con.execute("CREATE TABLE f (" + ", ".join(f'"{n}" {t}' for n, t in cols) + ")")
    t0 = dt.datetime(2026, 11, 20, 10, 0)
    recs = [(t0 + dt.timedelta(seconds=i), t0 + dt.timedelta(seconds=i + 1), "192.0.2.1", 1, 3, r["src_addr"],
             r["dst_addr"], r["src_port"], r["dst_port"], r["proto"], r["tcp_flags"], r["tos"], r["packets"],
             r["bytes"], 1, r["src_as"], r["dst_as"], "nfcapd.x", i, "", DAY, 10 + i % 2) for i, r in enumerate(rows)]
    # no VLANs nor revision 3's columns here: null, as before them
    named = [n for n, _ in cols if n not in ("src_vlan", "dst_vlan") and n not in FLOW.names[21:]]
    con.executemany(f"INSERT INTO f ({', '.join(named)}) VALUES ({', '.join('?' * len(named))})", recs)
    lake.mkdir(parents=True, exist_ok=True)
    con.execute(f"COPY f TO '{lake / 'flows'}' (FORMAT parquet, PARTITION_BY (date, hour), OVERWRITE_OR_IGNORE)")


def test_flowlake_anonymise_and_query_anonymise(files, tmp_path):
    orig, anon = files
    # a home of its own: the suite's shared lake must not gain these flows (test_query counts it)
    home = tmp_path / "home"
    lake = home / "lake"
    own = dict(os.environ, FLOWLAKE_HOME=str(home))
    lake_from(orig, lake)
    keyfile = tmp_path / "anon.key"
    keyfile.write_text(KEY + "\n")
    out = tmp_path / "share"
    res = run([FLOWLAKE, "anonymise", "--key-file", str(keyfile), "--date", DAY, "--out", str(out)], env=own)
    assert "300 flows in 2 files" in res.stdout
    src_files = sorted((lake / "flows" / f"date={DAY}").rglob("*.parquet"))
    pairs = [(f, out / "flows" / f.relative_to(lake / "flows")) for f in src_files]
    got = {}
    for a, b in pairs:
        ta, tb = pq.ParquetFile(a).read(), pq.ParquetFile(b).read()
        assert ta.schema == tb.schema
        for c in ta.column_names:
            if c not in ("src_addr", "dst_addr"):
                assert ta.column(c).equals(tb.column(c)), c
        for s, d, s2, d2 in zip(*(t.column(c).to_pylist() for t in (ta, tb) for c in ("src_addr", "dst_addr"))):
            got[(s, d)] = (s2, d2)
    assert len(got) == len({(r["src_addr"], r["dst_addr"]) for r in orig})
    for o, a in zip(orig, anon):  # nfanon's output, except its IPv6 destination bug
        s2, d2 = got[(o["src_addr"], o["dst_addr"])]
        assert s2 == a["src_addr"] and (d2 == a["dst_addr"]) == (":" not in o["dst_addr"])
    # query: the filter sees real addresses, the output shows pseudonyms (key from the environment)
    env = dict(own, FLOWLAKE_ANON_KEY=KEY)
    v6 = next(r for r in orig if ":" in r["src_addr"])
    res = run([FLOWLAKE, "query", f"src ip {v6['src_addr']} or src net 10.0.0.0/24", "--format", "json",
               "--limit", "0", "--anonymise"], env=env)
    shown = json.loads(res.stdout)
    want = {got[(r["src_addr"], r["dst_addr"])] for r in orig
            if r["src_addr"] == v6["src_addr"] or r["src_addr"].startswith("10.0.0.")}
    assert shown and {(r["src_addr"], r["dst_addr"]) for r in shown} == want
    assert not {r["src_addr"] for r in shown} & {r["src_addr"] for r in orig}
