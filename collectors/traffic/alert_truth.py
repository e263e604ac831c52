"""The traffic model's events as what the alert detectors must find, and alerts scored
against them: precision, recall and detection latency per detector (bench/alerts.py, the
tests).

Truth: a scanner event -> detector "scan", subject its source; a fan-in burst -> "fan_in",
its destination; a quiet period -> "exporter_silent", the router's address. An alert is a
true positive when its detector and subject match an event and it started between the
event's start and its end + `slack_ms` (silence is only visible after the threshold).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

EXPECT = {"scanner": ("scan", "src"), "fan-in": ("fan_in", "dst"), "quiet": ("exporter_silent", "exporter")}


def expected(events: list[dict]) -> list[dict]:
    out = []
    for e in events:
        if e["kind"] in EXPECT:
            detector, key = EXPECT[e["kind"]]
            out.append({"detector": detector, "subject": e[key], "start_ms": e["start_ms"], "end_ms": e["end_ms"],
                        "name": e["name"]})
    return out


def score(alerts: list[dict], events: list[dict], detectors=("scan", "fan_in", "exporter_silent"),
          slack_ms: int = 0) -> dict:
    """alerts: stored rows (ms times). -> per detector: alerts, tp, fp, events, found,
    precision, recall, latency_s (alert started - event start) per found event."""
    truth = expected(events)
    out = {}
    for det in detectors:
        mine = [a for a in alerts if a["detector"] == det]
        want = [t for t in truth if t["detector"] == det]
        tp, found, lat = 0, set(), []
        for a in mine:
            hit = [i for i, t in enumerate(want) if t["subject"] == a["subject"]
                   and t["start_ms"] <= a["started"] <= t["end_ms"] + slack_ms]
            if hit:
                tp += 1
                for i in hit:
                    if i not in found:
                        found.add(i)
                        lat.append((a["started"] - want[i]["start_ms"]) / 1000)
        out[det] = {"alerts": len(mine), "tp": tp, "fp": len(mine) - tp, "events": len(want), "found": len(found),
                    "precision": tp / len(mine) if mine else None,
                    "recall": len(found) / len(want) if want else None,
                    "latency_s": lat, "missed": [want[i]["name"] for i in range(len(want)) if i not in found],
                    "false": sorted({a["subject"] for a in mine} - {t["subject"] for t in want})[:10]}
    return out


def intervals(table: pa.Table, start_ms: int, end_ms: int, seconds: float):
    """The model's flows (lake columns, sorted by time_end) cut into rotation-long windows
    of flow time by their end, as nfcapd files would hold them: (name, start, end, flows)."""
    step = int(seconds * 1000)
    ends = pc.cast(table["time_end"], pa.int64()).to_numpy(zero_copy_only=False)
    edges = np.arange(start_ms, end_ms + step, step)
    cut = np.searchsorted(ends, edges, side="left")
    for k in range(len(edges) - 1):
        yield f"model.{k:06d}", int(edges[k]), int(edges[k + 1]), table.slice(cut[k], cut[k + 1] - cut[k])
