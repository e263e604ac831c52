"""Locality decided once: pipelines/locality.py is_local is the reference ("an address is
local when it lies in [site] local_prefixes"), VECTORS its table of cases, and every engine's
own code must answer as the reference does on every case:
- Spark: jobs/common.py add_local_flag (the reports' direction);
- DuckDB: pipelines/duck.py's rule behind with_direction (IPv4 in SQL, the rest by UDF);
- Go: jobs/toptalkers/locality.go, through the kernel's -classify mode.
"""
from __future__ import annotations

import json
import subprocess
from collections import defaultdict

import pytest

from flowlake.pipelines.locality import VECTORS, is_local, parse_prefixes


def test_reference_answers_the_table():
    wrong = [(a, p, want, why) for a, p, want, why in VECTORS if is_local(a, parse_prefixes(p)) != want]
    assert not wrong, "is_local differs from VECTORS' answers:\n" + "\n".join(map(repr, wrong))


def _by_prefixes():
    """Each prefix list once, with the indices of its cases."""
    groups = defaultdict(list)
    for i, (_, prefixes, _, _) in enumerate(VECTORS):
        groups[prefixes].append(i)
    return groups


def _spark(spark) -> list[bool]:
    from pyspark.sql import types as T

    from flowlake.jobs import common

    got = [None] * len(VECTORS)
    schema = T.StructType([T.StructField("i", T.IntegerType()), T.StructField("a", T.StringType())])
    for prefixes, idx in _by_prefixes().items():
        df = spark.createDataFrame([(i, VECTORS[i][0]) for i in idx], schema)
        for row in common.add_local_flag(df, "a", "loc", list(prefixes)).collect():
            got[row["i"]] = row["loc"]
    return got


def _duckdb() -> list[bool]:
    import duckdb

    from flowlake.pipelines import duck

    got = [None] * len(VECTORS)
    for prefixes, idx in _by_prefixes().items():
        con = duckdb.connect()
        con.execute("CREATE TABLE v (i INTEGER, a VARCHAR)")
        con.executemany("INSERT INTO v VALUES (?, ?)", [(i, VECTORS[i][0]) for i in idx])
        duck._local_addresses(con, "loc", "(SELECT a FROM v)", list(prefixes))
        for i, loc in con.execute("SELECT v.i, l.loc FROM v JOIN loc l ON v.a IS NOT DISTINCT FROM l.a").fetchall():
            got[i] = loc
        con.close()
    return got


def _go() -> list[bool]:
    from flowlake.base.gobuild import TOPTALKERS

    binary = TOPTALKERS.build()
    got = [None] * len(VECTORS)
    for prefixes, idx in _by_prefixes().items():
        lines = "".join(json.dumps(VECTORS[i][0]) + "\n" for i in idx)
        res = subprocess.run([str(binary), "-classify", "-local", ",".join(prefixes)], input=lines,
                             capture_output=True, text=True, timeout=60, check=False)
        assert res.returncode == 0, res.stderr
        answers = res.stdout.split()
        assert len(answers) == len(idx), res.stdout
        for i, answer in zip(idx, answers):
            got[i] = answer == "1"
    return got


@pytest.mark.integration
def test_every_engine_answers_as_the_reference(spark):
    want = [is_local(a, parse_prefixes(p)) for a, p, _, _ in VECTORS]
    engines = {"spark": _spark(spark), "duckdb": _duckdb(), "go": _go()}
    diff = [f"{name}: {VECTORS[i][0]!r} in {list(VECTORS[i][1])} ({VECTORS[i][3]}): "
            f"{got[i]}, the reference says {want[i]}"
            for name, got in engines.items() for i in range(len(VECTORS)) if got[i] != want[i]]
    assert not diff, "engines differ from pipelines/locality.py is_local:\n" + "\n".join(diff)
