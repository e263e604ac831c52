"""`[lake] uri` (issue 38, step 7's start): the lake can live outside $FLOWLAKE_HOME, named by
a path or a file:// URI (a mounted filesystem); the stack's writers, readers, status and
retention all follow it. Object stores are refused with what remains to do."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flowlake.base import config
from flowlake.collectors import ship
from flowlake.pipelines.lake_read import lake_files
from flowlake.pipelines.lake_writer import DeltaBatchWriter

FLOWLAKE = str(Path(sys.executable).with_name("flowlake"))


def _env(home: Path, uri: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWLAKE_")}
    env.update({"FLOWLAKE_HOME": str(home), "FLOWLAKE_KAFKA_PORT": "1"})
    if uri is not None:
        env["FLOWLAKE_LAKE_URI"] = uri
    return env


@pytest.mark.parametrize(("uri", "where"), [(None, "home/lake"), ("", "home/lake"),
                                            ("elsewhere/lake", "home/elsewhere/lake"), ("/ABS", "mnt/lake"),
                                            ("file:///ABS", "mnt/lake"), ("file://localhost/ABS", "mnt/lake")])
def test_uri_names_the_lake_folder(tmp_path, uri, where):
    mnt = tmp_path / "mnt" / "lake"
    if uri is not None:
        uri = uri.replace("ABS", str(mnt).lstrip("/"))
    cfg = config.load(env=_env(tmp_path / "home", uri))
    assert cfg.lake == tmp_path / where
    assert ship.quarantine_dir(cfg) == cfg.lake / "quarantine" / "nfcapd"


@pytest.mark.parametrize("uri", ["s3://bucket/lake", "s3a://bucket/lake", "gs://b/l", "file://otherhost/srv/lake"])
def test_object_stores_are_refused_naming_the_key(tmp_path, uri):
    cfg = config.load(env=_env(tmp_path, uri))
    with pytest.raises(ValueError, match=r"config \[lake\] uri = '" + uri.replace(".", r"\.") + "'"):
        _ = cfg.lake


def test_the_stack_writes_reads_and_reports_the_lake_at_the_uri(tmp_path):
    home, mnt = tmp_path / "home", tmp_path / "mnt" / "lake"
    cfg = config.load(env=_env(home, f"file://{mnt}"))
    w = DeltaBatchWriter(cfg, "active")
    staged = w.staging(0)
    (staged / "date=2026-11-20").mkdir(parents=True)
    pq.write_table(pa.table({"source": ["a", "b"], "destination": ["z", "z"]}),
                   staged / "date=2026-11-20" / "part-0.parquet")
    w.publish(0, staged, {"rows": 2})
    assert (mnt / "active" / "_delta_log").is_dir() and not (home / "lake" / "active").exists()
    version, files = lake_files(cfg, "active")
    assert version == 1 and len(files) == 1 and files[0].startswith(str(mnt))  # created, then the batch
    st = subprocess.run([FLOWLAKE, "status", "--json"], env=_env(home, f"file://{mnt}"), capture_output=True,
                        text=True, timeout=120)
    assert st.returncode == 0, st.stderr
    logs = json.loads(st.stdout)["lake_logs"]
    assert logs["tables"]["active"]["version"] == 1
    dry = subprocess.run([FLOWLAKE, "retention", "--dry-run", "--json"], env=_env(home, f"file://{mnt}"),
                         capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    kept = [t for t in json.loads(dry.stdout)["tiers"] if t["tier"] == "active"]
    assert kept and kept[0]["units"] == 1, kept
