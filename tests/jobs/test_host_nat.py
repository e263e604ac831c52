"""`flowlake host ADDR` shows the address's NAT translations in a time window (issue 32 part
5), on both engines (DuckDB and Spark), from hand-made lake rows carrying the revision-3 NAT
columns; the expected translations are written out by hand from the rows below."""
from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql.types import IntegerType, StringType, StructType

from flowlake.base import config
from flowlake.cli import main
from flowlake.jobs.query.nat import translations
from flowlake.schemas import FLOWS_TABLE

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from flow_rows import lake_row  # noqa: E402

pytestmark = pytest.mark.integration
NAT = {"src_addr_nat": StringType(), "dst_addr_nat": StringType(), "src_port_nat": IntegerType(),
       "dst_port_nat": IntegerType(), "nat_event": IntegerType(), "biflow_half": IntegerType()}
PUBLIC = "198.51.100.7"

# (minute after 14:00 on 2026-03-12, src, sport, dst, dport, src_nat, sport_nat, dst_nat, dport_nat, nat_event)
SPECS = [
    (1, "10.0.0.5", 40001, "8.8.8.8", 53, PUBLIC, 61001, None, None, 1),          # source NAT, created
    (3, "10.0.0.5", 40001, "8.8.8.8", 53, PUBLIC, 61001, None, None, 1),          # the same translation again
    (4, "10.0.0.5", 40001, "8.8.8.8", 53, PUBLIC, 61001, None, None, 2),          # ... deleted
    (2, "10.0.0.6", 40002, "9.9.9.9", 443, PUBLIC, 61002, None, None, 1),         # another inside host
    (90, "10.0.0.6", 40003, "9.9.9.9", 443, PUBLIC, 61003, None, None, 1),        # 15:30: outside the window
    (5, "203.0.113.9", 5555, PUBLIC, 443, None, None, "10.0.0.8", 8443, 1),       # destination NAT (port forward)
    (6, PUBLIC, 123, "192.0.2.1", 123, PUBLIC, 123, None, None, None),            # the same address and port: none
    (7, "10.0.0.5", 40009, "8.8.4.4", 53, "0.0.0.0", 0, None, None, 1),           # an all-zero NAT address: none
    (8, "10.0.0.5", 40010, "8.8.4.4", 53, None, None, None, None, None),          # no NAT columns
    # the reverse half of the first flow as a biflow (biflow_half 2: addresses and ports swapped,
    # the NAT columns the initiator's): no translation of its own
    (1, "8.8.8.8", 53, "10.0.0.5", 40001, PUBLIC, 61001, None, None, 1),
]
BIFLOW_HALF = {0: 1, len(SPECS) - 1: 2}
KEYS = ["kind", "inside_addr", "inside_port", "outside_addr", "outside_port", "nat_event", "flows", "first_seen",
        "last_seen"]


def at(minute: int, seconds: int = 0) -> dt.datetime:
    return dt.datetime(2026, 3, 12, 14, 0, tzinfo=dt.UTC) + dt.timedelta(minutes=minute, seconds=seconds)


def frame(spark):
    names = [f.name for f in FLOWS_TABLE.fields]
    schema = StructType(FLOWS_TABLE.spark_schema().fields)
    for c, t in NAT.items():
        if c not in names:
            schema = schema.add(c, t)
    rows = []
    for i, (m, src, sp, dst, dp, snat, spnat, dnat, dpnat, event) in enumerate(SPECS):
        given = {"time_start": at(m), "time_end": at(m, 10), "exporter": "192.0.2.254", "src_addr": src,
                 "dst_addr": dst, "src_port": sp, "dst_port": dp, "proto": 6, "packets": 2, "bytes": 200,
                 "source_file": "t", "file_seq": i, "date": "2026-03-12", "hour": at(m).hour}
        row = dict(zip(names, lake_row(**given), strict=True))
        row.update(src_addr_nat=snat, src_port_nat=spnat, dst_addr_nat=dnat, dst_port_nat=dpnat, nat_event=event,
                   biflow_half=BIFLOW_HALF.get(i, 0))
        rows.append(tuple(row[n] for n in schema.fieldNames()))
    return spark.createDataFrame(rows, schema)


def ts(minute: int, seconds: int = 0) -> str:
    return at(minute, seconds).strftime("%Y-%m-%dT%H:%M:%S.000Z")


# by first seen; (kind, inside addr, port, outside addr, port, nat_event, flows, first seen, last seen)
WANT_PUBLIC_IN_WINDOW = [
    ("source", "10.0.0.5", 40001, PUBLIC, 61001, 1, 2, ts(1), ts(3, 10)),
    ("source", "10.0.0.6", 40002, PUBLIC, 61002, 1, 1, ts(2), ts(2, 10)),
    ("source", "10.0.0.5", 40001, PUBLIC, 61001, 2, 1, ts(4), ts(4, 10)),
    ("destination", "10.0.0.8", 8443, PUBLIC, 443, 1, 1, ts(5), ts(5, 10)),
]


@pytest.fixture(scope="module")
def nat_lake(spark, cfg):
    """These rows as the only flows of the session's lake (others set aside, put back after)."""
    base = Path(cfg.lake) / "flows"
    aside = Path(cfg.lake) / ".flows-aside-test-host-nat"
    shutil.rmtree(aside, ignore_errors=True)
    if base.exists():
        base.rename(aside)
    frame(spark).write.partitionBy("date", "hour").parquet(str(base))
    yield base
    shutil.rmtree(base, ignore_errors=True)
    if aside.exists():
        aside.rename(base)


@pytest.fixture(params=["local", "spark"])
def engine(request, monkeypatch, cfg):
    monkeypatch.setenv("FLOWLAKE_QUERY_ENGINE", request.param)
    config.reset()
    yield request.param
    config.reset()


def host_json(*args: str) -> dict:
    res = CliRunner().invoke(main, ["host", *args, "--format", "json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_translations_of_a_public_address_in_a_window(nat_lake, engine):
    prof = host_json(PUBLIC, "--from", "2026-03-12T14:00", "--to", "2026-03-12T15:00")
    assert [tuple(r[k] for k in KEYS) for r in prof["nat"]] == WANT_PUBLIC_IN_WINDOW
    assert prof["nat_total"] == 4
    assert prof["flows"] == 2  # its own flows: the port forward's destination and the untranslated one
    # a window that holds only 15:30: the third inside host's translation alone
    later = host_json(PUBLIC, "--from", "2026-03-12T15:00", "--to", "2026-03-12T16:00")
    assert [tuple(r[k] for k in KEYS) for r in later["nat"]] == [
        ("source", "10.0.0.6", 40003, PUBLIC, 61003, 1, 1, ts(90), ts(90, 10))]
    # --nat-rows caps the list, the count stays
    capped = host_json(PUBLIC, "--from", "2026-03-12T14:00", "--to", "2026-03-12T15:00", "--nat-rows", "1")
    assert len(capped["nat"]) == 1 and capped["nat_total"] == 4


def test_translations_of_an_inside_address_and_the_table(nat_lake, engine):
    prof = host_json("10.0.0.5", "--from", "2026-03-12T14:00", "--to", "2026-03-12T15:00")
    assert [tuple(r[k] for k in KEYS) for r in prof["nat"]] == [WANT_PUBLIC_IN_WINDOW[0], WANT_PUBLIC_IN_WINDOW[2]]
    assert prof["flows"] == 6  # its flows, translated or not, both halves of the biflow
    inside = host_json("10.0.0.8")
    assert [r["outside_addr"] for r in inside["nat"]] == [PUBLIC] and inside["flows"] == 0
    res = CliRunner().invoke(main, ["host", "10.0.0.8"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "only NAT translations" in res.output and "NAT translations (1" in res.output
    assert "10.0.0.8" in res.output and "8443" in res.output


def test_a_frame_without_the_nat_columns_has_no_translations(spark):
    old = frame(spark).drop(*NAT)
    assert translations(old, PUBLIC) == ([], 0)
