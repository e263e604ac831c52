"""The Delta logs of the lake's tables are bounded and shown (issue 38): `[lake]
checkpoint_interval` and `log_retention_hours` become each table's properties (at creation,
and on an existing table), delta-rs then checkpoints and deletes expired commit files, and
`flowlake status` shows per table its version, the log's files and bytes, the last
checkpoint, the oldest version the log holds and the oldest still readable."""
from __future__ import annotations

import os
import time
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from rich.console import Console

from flowlake.base import config, delta
from flowlake.pipelines import lake_tables
from flowlake.pipelines import status as pipelines_status

SCHEMA = pa.schema([("n", pa.int64()), ("date", pa.string())])


def _cfg(home: Path, **lake) -> config.Config:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWLAKE_")}
    env["FLOWLAKE_HOME"] = str(home)
    env.update({f"FLOWLAKE_LAKE_{k.upper()}": str(v) for k, v in lake.items()})
    return config.load(env=env)


def _rows(day: str, start: int, n: int) -> pa.Table:
    return pa.table({"n": pa.array(range(start, start + n), pa.int64()), "date": [day] * n})


def _count(table: Path, version: int | None = None) -> int:
    return deltalake.DeltaTable(str(table), version=version).to_pyarrow_table().num_rows


def _age_log(table: Path, hours: float) -> None:
    then = time.time() - hours * 3600
    for p in (table / "_delta_log").iterdir():
        if p.is_file():
            os.utime(p, (then, then))


def test_the_log_is_bounded_by_the_config_and_status_shows_it(tmp_path):
    cfg = _cfg(tmp_path, checkpoint_interval=5, log_retention_hours=1)
    table = cfg.lake / "flows"
    delta.ensure_table(table, SCHEMA, ["date"], lake_tables.table_properties(cfg))
    conf = deltalake.DeltaTable(str(table)).metadata().configuration
    assert conf["delta.checkpointInterval"] == "5"
    assert conf["delta.logRetentionDuration"] == "interval 1 hours"
    assert conf["delta.enableDeletionVectors"] == "false"
    for b in range(12):
        assert delta.append_batch(table, _rows("2026-11-20" if b < 6 else "2026-11-21", b * 10, 10), "t", b)
    st = delta.log_status(table)
    assert st["version"] == 12
    assert st["commit_files"] == 13 and st["oldest_log_version"] == 0 and st["oldest_readable_version"] == 0
    assert st["checkpoints"] == 2, sorted(os.listdir(table / "_delta_log"))
    cp = st["last_checkpoint"]
    assert cp is not None and (table / "_delta_log" / f"{cp['version']:020d}.checkpoint.parquet").is_file()
    assert 0 <= st["version"] - cp["version"] < 5
    on_disk = [p for p in (table / "_delta_log").iterdir() if p.is_file()]
    assert st["log_files"] == len(on_disk) and st["log_bytes"] == sum(p.stat().st_size for p in on_disk)
    assert st["checkpoint_interval"] == 5 and st["log_retention"] == "interval 1 hours"

    # commit files older than the log retention go at the next checkpoint; the table reads whole
    _age_log(table, 2)
    for b in range(12, 17):
        assert delta.append_batch(table, _rows("2026-11-21", b * 10, 10), "t", b)
    aged = delta.log_status(table)
    assert aged["version"] == 17
    assert aged["oldest_log_version"] > 0, sorted(os.listdir(table / "_delta_log"))
    assert aged["commit_files"] < 18 and not (table / "_delta_log" / f"{0:020d}.json").exists()
    assert _count(table) == 170
    assert deltalake.DeltaTable(str(table)).transaction_version("t") == 16  # the ingest's batch survives cleanup
    with pytest.raises(Exception):  # noqa: B017, PT011 - delta-rs' error type for a version the log lost varies
        deltalake.DeltaTable(str(table), version=0)

    # retention: a day deleted and vacuumed now -> only versions after the DELETE stay readable
    assert delta.delete_partitions(table, [{"date": "2026-11-20"}]) == 60
    deleted = deltalake.DeltaTable(str(table)).version()
    assert deleted == 18
    removed = delta.vacuum(table, 0)  # delta-rs records VACUUM START and END as commits too
    assert removed
    gone = delta.log_status(table)
    assert gone["version"] > deleted and gone["oldest_readable_version"] == deleted
    assert _count(table, deleted) == 110
    assert not delta._readable(str(table), deleted - 1)

    # flowlake status: the section and its table
    sections = pipelines_status.sections(cfg)
    logs = sections["lake_logs"]
    assert logs["checkpoint_interval"] == 5 and logs["log_retention_hours"] == 1
    assert set(logs["tables"]) == {"flows"}
    assert logs["tables"]["flows"]["version"] == gone["version"]
    assert logs["tables"]["flows"]["oldest_readable_version"] == deleted
    console = Console(record=True, width=200)
    lake_tables.render(console, {"lake_logs": logs})
    text = console.export_text()
    assert "lake: Delta logs (checkpoint every 5 commits, commit files kept 1 h)" in text
    assert "flows" in text and f"{gone['log_bytes']:,}" in text and "as configured" in text


def test_an_existing_table_takes_the_configured_bounds(tmp_path):
    cfg = _cfg(tmp_path)
    table = cfg.lake / "flows"
    delta.ensure_table(table, SCHEMA, ["date"])
    assert "delta.checkpointInterval" not in deltalake.DeltaTable(str(table)).metadata().configuration
    before = deltalake.DeltaTable(str(table)).version()
    delta.ensure_table(table, SCHEMA, ["date"], lake_tables.table_properties(cfg))
    t = deltalake.DeltaTable(str(table))
    assert t.version() == before + 1
    assert t.metadata().configuration["delta.checkpointInterval"] == "100"  # the defaults of flowlake.toml
    assert t.metadata().configuration["delta.logRetentionDuration"] == "interval 48 hours"
    delta.ensure_table(table, SCHEMA, ["date"], lake_tables.table_properties(cfg))
    assert deltalake.DeltaTable(str(table)).version() == before + 1  # equal: no commit


def test_nested_tables_are_found_and_a_damaged_log_is_named(tmp_path):
    cfg = _cfg(tmp_path)
    for name in ("alerts", "rollups/1m"):
        delta.ensure_table(cfg.lake / name, SCHEMA, ["date"])
    (cfg.lake / "reports" / "x" / "date=2026-11-20").mkdir(parents=True)  # plain Parquet folders: not listed
    assert lake_tables.delta_tables(cfg.lake) == ["alerts", "rollups/1m"]
    (cfg.lake / "alerts" / "_delta_log" / f"{0:020d}.json").write_text("not json\n")
    logs = lake_tables.log_status(cfg)
    assert "error" in logs["tables"]["alerts"] and logs["tables"]["rollups/1m"]["version"] == 0
    console = Console(record=True, width=250)
    lake_tables.render(console, {"lake_logs": logs})
    text = console.export_text()
    assert "alerts" in text
    # made without the bounds: its own (Delta's defaults) shown until its writer sets them
    assert "every 100, interval 30 days (Delta's default)" in text


@pytest.mark.parametrize(("key", "value"), [("checkpoint_interval", 0), ("checkpoint_interval", 2.5),
                                             ("log_retention_hours", 0), ("log_retention_hours", 1.5)])
def test_bad_bounds_name_the_key(key, value):
    good = {"checkpoint_interval": 100, "log_retention_hours": 48}
    with pytest.raises(ValueError, match=rf"\[lake\] {key} = {value}"):
        delta.log_properties(**{**good, key: value})
