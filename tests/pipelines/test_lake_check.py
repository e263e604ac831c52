"""A truncated Parquet file in the lake is quarantined with its reason; the rest is read."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq

from flowlake.base import delta
from flowlake.pipelines import lake_check


def test_truncated_parquet_is_quarantined_and_the_rest_stays(tmp_path):
    part = tmp_path / "flows" / "date=2026-11-20" / "hour=3"
    part.mkdir(parents=True)
    table = pa.table({"bytes": list(range(1000)), "src_addr": ["10.0.0.1"] * 1000})
    pq.write_table(table, part / "good.parquet")
    pq.write_table(table, part / "victim.parquet")
    data = (part / "victim.parquet").read_bytes()
    (part / "victim.parquet").write_bytes(data[: len(data) // 2])
    (part / "empty.parquet").write_bytes(b"")

    moved = lake_check.check(tmp_path, "flows", "date=2026-11-20")
    assert sorted(p.name for p, _ in moved) == ["empty.parquet", "victim.parquet"]
    assert all("truncated" in reason for _, reason in moved)
    assert [p.name for p in part.glob("*.parquet")] == ["good.parquet"]
    reasons = list((tmp_path / "quarantine" / "lake" / "flows").rglob("*.reason"))
    assert len(reasons) == 2 and "victim.parquet" in "".join(r.read_text() for r in reasons)
    assert lake_check.quarantined(tmp_path) == 2
    assert pq.read_table(part).num_rows == 1000
    assert lake_check.check(tmp_path, "flows") == []  # idempotent


def test_a_corrupt_file_of_a_delta_table_is_named_with_table_and_version(tmp_path):
    """lake/flows as a Delta table: a truncated file its version lists is reported (table,
    version, file) and not moved (the log lists it); a bad file no version lists is not the
    table's; another table's check is not affected."""
    table = tmp_path / "flows"
    rows = pa.table({"bytes": list(range(100)), "date": ["2026-11-20"] * 100, "hour": pa.array([3] * 100, pa.int32())})
    for b in range(2):
        assert delta.append_batch(table, rows, "ingest-flows", b, partition_by=["date", "hour"])
    part = table / "date=2026-11-20" / "hour=3"
    (part / "dead-batch.parquet").write_bytes(b"PAR1 half")  # no version lists it
    assert lake_check.check(tmp_path, "flows", "date=2026-11-20") == []
    victim = sorted(part.glob("part-*.parquet"))[0]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    try:
        lake_check.check(tmp_path, "flows", "date=2026-11-20")
    except lake_check.CorruptLakeFile as exc:
        text = str(exc)
    else:
        raise AssertionError("the truncated file was not reported")
    assert "lake/flows version 1" in text and victim.name in text and "truncated" in text
    assert victim.exists() and lake_check.quarantined(tmp_path) == 0
    other = tmp_path / "reports" / "x" / "date=2026-11-20"
    other.mkdir(parents=True)
    pq.write_table(pa.table({"a": [1]}), other / "p.parquet")
    assert lake_check.check(tmp_path, "reports/x") == []
