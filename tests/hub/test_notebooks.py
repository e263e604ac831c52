"""Every notebook in notebooks/ runs end to end (nbclient, a real Jupyter kernel) against a
small lake built here with pyarrow in the lake's layout; any cell error fails the test."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration  # real Jupyter kernels
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def write_lake(home: Path, days: int = 3, flows_per_day: int = 4000, seed: int = 1) -> Path:
    """A few days of flows: heavy-tailed sizes, growing volume, one port scanner."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from flowlake.schemas import FLOW

    rng = np.random.default_rng(seed)
    base = home / "lake" / "flows"
    start = dt.datetime(2026, 11, 20)  # naive UTC: numpy datetime64 has no time zones
    seq = 0
    for d in range(days):
        n = int(flows_per_day * (1 + 0.2 * d))
        t = start + dt.timedelta(days=d)
        offs = np.sort(rng.uniform(0, 86400, n))
        packets = np.floor(rng.pareto(1.3, n) + 1).astype(np.int64) * rng.integers(1, 4, n)
        cols = {
            "time_start": [t + dt.timedelta(seconds=float(o)) for o in offs],
            "src_addr": [f"10.0.{i % 4}.{i % 250 + 1}" for i in rng.integers(0, 1000, n)],
            "dst_addr": [f"192.0.2.{i}" for i in rng.integers(1, 200, n)],
            "src_port": rng.integers(1024, 65535, n), "dst_port": rng.choice([22, 53, 80, 443, 8080], n),
            "proto": rng.choice([6, 17], n), "packets": packets,
        }
        scan = 300  # one scanner each day: SYN to 300 hosts on port 22
        cols["time_start"] += [t + dt.timedelta(hours=3, seconds=0.5 * k) for k in range(scan)]
        cols["src_addr"] += ["198.51.100.66"] * scan
        cols["dst_addr"] += [f"10.1.{k // 250}.{k % 250 + 1}" for k in range(scan)]
        cols["src_port"] = np.concatenate([cols["src_port"], 40000 + np.arange(scan)])
        cols["dst_port"] = np.concatenate([cols["dst_port"], np.full(scan, 22)])
        cols["proto"] = np.concatenate([cols["proto"], np.full(scan, 6)])
        cols["packets"] = np.concatenate([cols["packets"], np.ones(scan, dtype=np.int64)])
        m = len(cols["src_addr"])
        ts = np.array(cols["time_start"], dtype="datetime64[ms]")
        dur = (cols["packets"] * rng.uniform(1, 50, m)).astype("timedelta64[ms]")
        table = {
            "time_start": ts, "time_end": ts + dur, "exporter": ["192.0.2.254"] * m,
            "input_if": np.ones(m, np.int64), "output_if": np.full(m, 2, np.int64),
            "src_addr": cols["src_addr"], "dst_addr": cols["dst_addr"],
            "src_port": cols["src_port"].astype(np.int32), "dst_port": cols["dst_port"].astype(np.int32),
            "proto": cols["proto"].astype(np.int32), "tcp_flags": np.full(m, 0x1B, np.int32),
            "tos": np.zeros(m, np.int32), "packets": cols["packets"],
            "bytes": cols["packets"] * rng.integers(40, 1500, m), "sampling_rate": np.ones(m, np.int32),
            "src_as": np.zeros(m, np.int64), "dst_as": np.zeros(m, np.int64),
            "source_file": ["synthetic"] * m, "file_seq": np.arange(seq, seq + m, dtype=np.int64),
        }
        seq += m
        hours = ts.astype("datetime64[h]").astype(np.int64) % 24
        for h in np.unique(hours):
            sel = hours == h
            arrays = {k: (np.asarray(v)[sel]) for k, v in table.items()}
            arrays["time_start"] = pa.array(arrays["time_start"], pa.timestamp("ms", tz="UTC"))
            arrays["time_end"] = pa.array(arrays["time_end"], pa.timestamp("ms", tz="UTC"))
            part = base / f"date={t:%Y-%m-%d}" / f"hour={int(h):02d}"
            part.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({f.name: arrays[f.name] for f in FLOW.fields if f.name in arrays}), part / "part-0.parquet",
                           compression="zstd")
    return base


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path_factory, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    from flowlake.base import config
    from superset_lake import write_rollups

    home = tmp_path_factory.getbasetemp() / "notebook-lake"
    monkeypatch.setenv("FLOWLAKE_HOME", str(home))  # the kernel inherits it
    if not (home / "lake").exists():
        write_lake(home)
        config.reset()
        write_rollups(config.get())  # as hour close writes them
        config.reset()
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(tmp_path_factory.mktemp("nb"))}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any(o.output_type == "display_data" and "image/png" in o.get("data", {}) for o in outputs), \
        f"{path.name} drew no plot"


def test_notebooks_exist():
    assert {p.stem for p in NOTEBOOKS} >= {"security_investigation", "capacity_planning", "flow_sizes"}


def test_security_notebook_finds_the_scanner(tmp_path_factory, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    home = tmp_path_factory.getbasetemp() / "notebook-lake"
    if not (home / "lake").exists():
        write_lake(home)
    monkeypatch.setenv("FLOWLAKE_HOME", str(home))
    nb = nbformat.read(REPO / "notebooks" / "security_investigation.ipynb", as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=300).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "investigating 198.51.100.66" in text
