"""Enrichment's columns as Arrow builds them (pipelines/enrich/answers.py): the same values
as a per-row lookup, across tables whose keys come and go (the recent-keys match starting
over), and lake files that every reader takes as strings, mixed with files written before
(plain string columns)."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import mmdb_files  # noqa: E402
from test_enrich import NETS, RULES, flows  # noqa: E402

from flowlake.pipelines.enrich import answers, apply  # noqa: E402
from flowlake.pipelines.flow_ingest import HourFiles  # noqa: E402
from flowlake.schemas.enrich import ENRICHMENT_NAMES  # noqa: E402

IF_COLS = ("name", "description", "speed", "boundary", "connectivity", "provider")
ADDR_COLS = ("country", "city", "net_name", "net_role", "net_site", "net_region", "net_tenant")


def plan(tmp_path: Path) -> apply.Plan:
    asn = mmdb_files.write(tmp_path / "asn.mmdb", "GeoLite2-ASN", NETS)
    geo = mmdb_files.write(tmp_path / "geo.mmdb", "GeoLite2-City", NETS)
    nets = tmp_path / "nets.csv"
    nets.write_text("prefix,name,role,site,region,tenant\n10.0.0.0/8,campus,internal,slac,us-west,doe\n"
                    "10.1.0.0/16,lab,lab,b50,us-west,hep\n2001:db8::/32,campus6,internal,slac,us-west,doe\n")
    directory = {"192.0.2.1": ("border-1", {1: ("et-1", "Transit: Cogent 1", 100000), 2: ("et-2", "core", 10000)}),
                 "2001:db8::1": ("border-6", {7: ("et-7", "IX: DECIX", 40000)})}
    return apply.Plan(key="cols", asn_path=str(asn), geo_path=str(geo), networks_path=str(nets),
                      rules=tuple(RULES), directory=directory, refresh_dir=str(tmp_path / "refresh"))


def random_flows(rng: random.Random, n: int, pool: list[str]) -> pa.Table:
    return flows([{"exporter": rng.choice(["192.0.2.1", "2001:db8::1", "127.0.0.9"]),
                   "input_if": rng.choice([0, 1, 2, 7, 9]), "output_if": rng.choice([0, 1, 2, 7]),
                   "src_addr": rng.choice(pool), "dst_addr": rng.choice(pool),
                   "src_as": rng.choice([0, 0, 0, 3356])} for _ in range(n)])


def test_columns_equal_a_per_row_lookup_while_keys_come_and_go(tmp_path, monkeypatch):
    monkeypatch.setattr(answers, "RECENT_KEYS", 40)  # small: the recent keys start over often
    rng = random.Random(3)
    pool = ([f"10.{rng.randrange(3)}.{rng.randrange(256)}.{rng.randrange(256)}" for _ in range(60)]
            + [f"2001:db8:{rng.randrange(6):x}::{rng.randrange(99):x}" for _ in range(30)]
            + ["192.0.2.9", "198.51.100.1", "::1"])
    e = apply.Enricher(plan(tmp_path))
    ref = apply.Enricher(plan(tmp_path))  # answers one key at a time
    for i in range(12):
        window = pool[(i * 17) % len(pool):][:35] or pool  # tables share some keys with the last ones
        # a row group's messages: tables of several chunks
        table = pa.concat_tables([random_flows(rng, rng.choice([1, 20, 300]), window)
                                  for _ in range(rng.choice([1, 3]))])
        got = apply.enrich_table(table, e).to_pylist()
        for row, flow in zip(got, table.to_pylist()):
            for side, col in (("in", "input_if"), ("out", "output_if")):
                want = ref.interface(flow["exporter"], flow[col])
                assert tuple(row[f"{side}_if_{c}"] for c in IF_COLS) == want, (i, side, flow)
            assert row["exporter_name"] == ref.exporter_name(flow["exporter"])
            for side in ("src", "dst"):
                asn, *rest = ref.address(flow[f"{side}_addr"])
                assert tuple(row[f"{side}_{c}"] for c in ADDR_COLS) == tuple(rest), (i, side, flow)
                assert row[f"{side}_as"] == (flow[f"{side}_as"] or asn)
    # each distinct value once in a column's dictionary (not once per answer)
    t = apply.enrich_table(random_flows(rng, 300, pool), e)
    for name in ("src_country", "src_net_region", "in_if_boundary"):
        d = t.column(name).chunk(0).dictionary.to_pylist()
        assert len(d) == len(set(d)), (name, d)
    assert len(t.column("src_net_region").chunk(0).dictionary) <= 2  # "us-west" and ""


def test_lake_files_read_as_strings_beside_files_written_before(tmp_path):
    e = apply.Enricher(plan(tmp_path))
    rng = random.Random(5)
    pool = [f"10.1.{i}.{j}" for i in range(3) for j in range(1, 40)] + ["2001:db8::5", "192.0.2.7"]
    new = HourFiles(tmp_path / "new", "part-new", apply.lake_schema(), 1000)
    tables = [apply.enrich_table(random_flows(rng, 700, pool), e) for _ in range(3)]
    for t in tables:
        new.add(t)
    [(new_file, rows)] = new.close()
    assert rows == 2100
    # a file as written before: the enrichment columns as plain strings
    before = pa.concat_tables(tables).cast(pa.schema([f.with_type(pa.string()) if f.type == apply.DICT else f
                                                      for f in apply.lake_schema()]))
    old_file = Path(new_file).with_name("part-old.parquet")
    pq.write_table(before, old_file, compression="zstd", use_deprecated_int96_timestamps=True)
    meta = pq.ParquetFile(new_file).metadata
    for name in ENRICHMENT_NAMES:
        col = meta.schema.column(meta.schema.names.index(name))
        want = "INT64" if name.endswith(("_speed", "_as")) else "BYTE_ARRAY"
        assert col.physical_type == want and (want == "INT64" or str(col.logical_type) == "String"), name
    assert "PLAIN_DICTIONARY" in meta.row_group(0).column(meta.schema.names.index("src_city")).encodings \
        or "RLE_DICTIONARY" in meta.row_group(0).column(meta.schema.names.index("src_city")).encodings
    # ingest files: no statistics on the enrichment columns (their cost, nothing skipped);
    # the flow columns keep theirs (INT96 times have none, as Arrow writes them)
    group = meta.row_group(0)
    stats = {group.column(i).path_in_schema: group.column(i).statistics for i in range(group.num_columns)}
    assert all(stats[n] is None for n in ENRICHMENT_NAMES), [n for n in ENRICHMENT_NAMES if stats[n] is not None]
    assert all(stats[n] is not None and stats[n].has_min_max for n in ("src_addr", "bytes", "dst_port"))
    # both files, one dataset: the same rows; DuckDB sees VARCHAR
    both = ds.dataset([new_file, str(old_file)], format="parquet").to_table(columns=list(ENRICHMENT_NAMES))
    half = both.num_rows // 2
    assert both.slice(0, half).cast(both.slice(half).schema).to_pylist() == both.slice(half).to_pylist()
    con = duckdb.connect()
    types = {r[0]: r[1] for r in con.execute(f"describe select * from read_parquet(['{new_file}', '{old_file}'])")
             .fetchall()}
    assert types["src_country"] == types["in_if_provider"] == "VARCHAR" and types["in_if_speed"] == "BIGINT"
    counts = con.execute(f"select src_city, count(*) from read_parquet(['{new_file}', '{old_file}']) "
                         "group by 1 order by 1").fetchall()
    assert counts == [(c, 2 * n) for c, n in con.execute(
        f"select src_city, count(*) from read_parquet('{old_file}') group by 1 order by 1").fetchall()]
    assert {c for c, _ in counts} == {"Paris", "Geneva", "Menlo Park"}


def test_mmdb_records_cached_per_network_equal_the_readers(tmp_path, monkeypatch):
    import maxminddb

    from flowlake.pipelines.enrich import mmdb, networks

    nets = {**NETS, "10.1.128.0/17": (64510, "half", "IT", "Rome"), "10.1.2.0/24": (64511, "c", "ES", "Madrid"),
            "2001:db8:5::/48": (64512, "six", "AT", "Vienna")}
    db = mmdb_files.write(tmp_path / "city.mmdb", "GeoLite2-City", nets)
    rng = random.Random(11)
    addrs = ([f"10.{rng.choice([0, 1, 2])}.{rng.choice([2, 3, 200])}.{rng.randrange(256)}" for _ in range(400)]
             + [f"2001:db8:{rng.choice([0, 5, 6])}::{rng.randrange(999):x}" for _ in range(200)]
             + ["192.0.2.1", "198.51.100.7", "::1", "::ffff:10.1.2.3", "0.0.0.0", "255.255.255.255"])
    ref = maxminddb.open_database(str(db), maxminddb.MODE_MMAP_EXT)
    for max_lengths in (8, 1):  # 1: networks of a second prefix length are not kept, still answered
        monkeypatch.setattr(mmdb.Lookup, "MAX_LENGTHS", max_lengths)
        cached = mmdb.Lookup(str(db))
        for _ in range(2):
            for a in rng.sample(addrs, len(addrs)):
                assert cached.get(a, networks.address_int(a)) == ref.get(a), a
        assert sum(map(len, cached.nets.values())) < len(set(addrs)) / 2  # networks, not addresses
        assert max(len(x) for x in cached.lengths.values()) <= max_lengths
