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
    import pyarrow as pa

    return schema.append(pa.field("run_id", pa.string(), nullable=True))


def tag(table, runs: dict[str, tuple[str, int, int]]):
    """Append `run_id` to a flows Arrow table (FlowBatch schema)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = np.full(table.num_rows, "", dtype=object)
    if runs and table.num_rows:
        exporters = {e for e, _, _ in runs.values()}
        exp = table.column("exporter")
        mine = pc.is_in(exp, value_set=pa.array(sorted(exporters))).to_numpy(zero_copy_only=False)
        if mine.any():
            ts = table.column("time_start").cast(pa.int64()).to_numpy()
            exp_np = exp.to_numpy(zero_copy_only=False)
            # by start: where an open-ended window (a run killed mid-way) overlaps a later
            # run, the later run wins. The slack only catches flows no run's own window
            # holds: a flow inside one run's window never goes to a neighbour through the
            # neighbour's slack (back-to-back runs are often closer than 2 s).
            ordered = sorted(runs.items(), key=lambda kv: kv[1][1])
            for slack in (SLACK_MS, 0):
                for run_id, (e, start, end) in ordered:
                    hit = mine & (exp_np == e) & (ts >= start - slack) & (ts <= end + slack)
                    ids[hit] = run_id
    return table.append_column(pa.field("run_id", pa.string(), nullable=True), pa.array(ids, pa.string()))
