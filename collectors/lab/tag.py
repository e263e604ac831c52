"""The flows lake's `run_id` column: which lab run (`flowlake lab run`) a flow belongs to.

The lab writes a run registry (one JSON line per run event): the loopback address its
NetFlow reached nfcapd from, and the run's time window. A flow whose exporter and
time_start match an entry carries that run_id; every other flow gets '' (old files,
written before the column existed, read as null). A run is registered when it starts
(open-ended) and again when it ends, so flows shipped before the run finished are tagged.
"""
from __future__ import annotations

import json
from pathlib import Path

SLACK_MS = 2000  # softflowd stamps flows on the host clock, as the lab does: a little slack


def registry_path(cfg) -> Path:
    """One JSON line per run start and end (about 150 bytes each): exporter, start, end, run_id."""
    return cfg.path("state", "lab_runs.jsonl")


def load(path: str | Path) -> dict[str, tuple[str, int, int]]:
    """run_id -> (exporter, start ms, end ms); the last line of a run wins."""
    out: dict[str, tuple[str, int, int]] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            r = json.loads(line)
            out[r["run_id"]] = (str(r["exporter"]), int(r["start"]), int(r["end"]))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a crash: that run's later line (or none) decides
    return out


def with_run_id(schema):
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

    return schema.append(pa.field("run_id", pa.string(), nullable=True))


def tag(table, runs: dict[str, tuple[str, int, int]]):
    """Append `run_id` to a flows Arrow table (FlowBatch schema)."""
    import numpy as np  # noqa: PLC0415  (start-up: numpy)
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
    import pyarrow.compute as pc  # noqa: PLC0415  (start-up: pyarrow)

    ids = np.full(table.num_rows, "", dtype=object)
    if runs and table.num_rows:
        exporters = {e for e, _, _ in runs.values()}
        exp = table.column("exporter")
        mine = pc.is_in(exp, value_set=pa.array(sorted(exporters))).to_numpy(zero_copy_only=False)
        if mine.any():
            ts = table.column("time_start").cast(pa.int64()).to_numpy()
            te = (table.column("time_end").cast(pa.int64()).to_numpy() if "time_end" in table.column_names else ts)
            exp_np = exp.to_numpy(zero_copy_only=False)
            # A flow goes to the window it overlaps most: the lab exports IPFIX with
            # millisecond stamps, but with NetFlow v9 (whole seconds plus uptime offsets,
            # as the lab exported before) a run's flow may seem to start up to ~1.5 s
            # before its window, inside the previous run's (back-to-back runs are often
            # closer than that), while it lies almost wholly in its own. A flow no window
            # holds goes to the nearest within the slack (overlap = minus the distance).
            # Ties (an open-ended window of a run killed mid-way over a later run): the
            # later run wins.
            best = np.full(table.num_rows, -np.inf)
            for run_id, (e, start, end) in sorted(runs.items(), key=lambda kv: kv[1][1]):
                near = mine & (exp_np == e) & (ts >= start - SLACK_MS) & (ts <= end + SLACK_MS)
                overlap = np.minimum(te, end) - np.maximum(ts, start)
                hit = near & (overlap >= best)
                ids[hit] = run_id
                best[hit] = overlap[hit]
    return table.append_column(pa.field("run_id", pa.string(), nullable=True), pa.array(ids, pa.string()))
