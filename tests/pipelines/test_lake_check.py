"""A truncated Parquet file in the lake is quarantined with its reason; the rest is read."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq

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
