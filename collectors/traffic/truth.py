"""The truth file: exactly what was exported (per exporter and in total), the model's
parameters and the listed events. JSON, or Parquet with one row per exporter and the
full JSON document in the file's key-value metadata (key b"flowlake.truth")."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .model import BEHAVIOURS, CLASSES, landed_vlans


def counts(f: np.ndarray) -> dict:
    return {"flows": int(len(f)), "packets": int(f["packets"].sum()), "bytes": int(f["bytes"].sum())}


def sampled_counts(f: np.ndarray, plan, sampler: np.ndarray, rates: np.ndarray) -> dict:
    """What flowlake must land for one exporter: wire counts x the rate in force when each
    record was exported, in total and per sampler (form, id, rates announced)."""
    if plan is not None and not plan.announce:
        rates = np.zeros(len(f), np.int64)  # never announced: the collector cannot know
    pk, by = f["packets"].astype(np.int64) * np.maximum(rates, 1), f["bytes"].astype(np.int64) * np.maximum(rates, 1)
    out = {"lake_packets": int(pk.sum()), "lake_bytes": int(by.sum()), "sampling_form": plan.form if plan else None,
           "samplers": [], "by_rate": {}}
    for r in np.unique(rates):
        sel = rates == r
        out["by_rate"][str(int(r))] = {"flows": int(sel.sum()), "lake_packets": int(pk[sel].sum()),
                                       "lake_bytes": int(by[sel].sum())}
    for k, s in enumerate(plan.samplers if plan else []):
        sel = sampler == k
        out["samplers"].append({"id": s.id, "rates": sorted({int(r) for r in rates[sel]}), "flows": int(sel.sum()),
                                "packets": int(f["packets"][sel].sum()), "bytes": int(f["bytes"][sel].sum()),
                                "lake_packets": int(pk[sel].sum()), "lake_bytes": int(by[sel].sum())})
    return out


def summarize(flows: np.ndarray, params, exporters: list[dict]) -> dict:
    per_class = {c: counts(flows[flows["klass"] == i]) for i, c in enumerate(CLASSES)}
    per_app = {a.name: counts(flows[(flows["app"] == i) & (flows["event"] == 0)])
               for i, a in enumerate(params.apps)}
    # the EVL behaviour class each flow was drawn as (jobs/behaviour_classes.py must find it)
    per_behaviour = {b: counts(flows[flows["behaviour"] == i]) for i, b in enumerate(BEHAVIOURS)}
    return {"totals": counts(flows), "per_class": per_class, "per_app_background": per_app,
            "per_behaviour": per_behaviour,
            "ipv6_flows": int(flows["ipv6"].sum()), "exporters": exporters}


def vlan_counts(f: np.ndarray, params, version: int) -> dict:
    """What the lake must hold per VLAN: side ("in" = src_vlan, "out" = dst_vlan) -> VLAN id
    (text) -> flows, packets, bytes (sampling-corrected), after nfcapd 1.7.1 kept or dropped
    each router's VLAN fields (model.landed_vlans); VLAN "0" = none landed."""
    rates = np.array([r.sampling_rate for r in params.routers], np.int64)[f["router"]]
    pk, by = f["packets"].astype(np.int64) * rates, f["bytes"].astype(np.int64) * rates
    out = {}
    for side, vlans in zip(("in", "out"), landed_vlans(f, params, version)):
        out[side] = {str(int(v)): {"flows": int((vlans == v).sum()), "packets": int(pk[vlans == v].sum()),
                                   "bytes": int(by[vlans == v].sum())} for v in np.unique(vlans)}
    return out


def record3_counts(f: np.ndarray, params, x) -> dict | None:
    """Revision 3 (record3.py): biflows and the rows the lake holds for them (one more per
    biflow), reverse counters sampling-corrected; None when no router exports revision 3."""
    if x is None:
        return None
    on = np.array([bool(r.record3) for r in params.routers])[f["router"]]
    rates = np.array([r.sampling_rate for r in params.routers], np.int64)[f["router"]]
    bi = on & ((x["out_packets"] > 0) | (x["out_bytes"] > 0))
    return {"routers": [r.name for r in params.routers if r.record3], "biflows": int(bi.sum()),
            "lake_rows": int(len(f) + bi.sum()),
            "reverse_packets": int((x["out_packets"][bi].astype(np.int64) * rates[bi]).sum()),
            "reverse_bytes": int((x["out_bytes"][bi].astype(np.int64) * rates[bi]).sum())}


def write(truth: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = json.dumps(truth, indent=1, default=_default)
    if path.suffix == ".json":
        path.write_text(doc)
    elif path.suffix == ".parquet":
        import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
        import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: pyarrow)

        rows = truth["exporters"]
        cols = {k: [r[k] for r in rows] for k in rows[0]} if rows else {}
        table = pa.table(cols).replace_schema_metadata({b"flowlake.truth": doc.encode()})
        pq.write_table(table, path)
    else:
        raise ValueError(f"{path}: truth file must end in .json or .parquet")
    return path


def read(path: str | Path) -> dict:
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: pyarrow)

        return json.loads(pq.read_schema(path).metadata[b"flowlake.truth"])
    return json.loads(path.read_text())


def _default(obj):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, (tuple, set)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj)}")
