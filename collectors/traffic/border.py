"""A multi-router border with truth (issue 34): the model's flows, each once (the truth),
as a site with three border routers and an internal core router would export them.

Every truth flow enters or leaves the site at its entry router E (the model's `exporter`:
border-a, border-b or border-c) and is observed there on ingress (flow_direction 0); routers
that export on both interfaces also send an egress record of it (flow_direction 1). Every
`second_every`-th flow also crosses a second border router X (the next one, on internal
interfaces) and the core router between them, each observing it too. So a flow is seen at 1
to 5 observation points.

Routers (Router.address as the model's):
- border-a 127.0.0.2: unsampled, exports ingress and egress, interfaces classified
  (uplink external, the rest internal);
- border-b 127.0.0.3: sampled 1:5, ingress only, interfaces unclassified (no SNMP names):
  `auto` counts its observations by key;
- border-c 127.0.0.4: sampled 1:10, ingress only, classified;
- core 127.0.0.9: unsampled, ingress and egress, classified internal.

Counts: the lake holds packets and bytes multiplied by the sampling rate. A truth flow's
counts are what its entry router reports (multiples of its rate: the model's wire counts x
rate); a router sampling at a rate that divides the entry router's (1, or 5 of 10) reports
the same counts; one sampling coarser reports floor(count / rate) x rate (and no record at
all when that leaves no packet), as an estimate that differs. So `key` (lowest rate first)
and `boundary` (the entry router) both count each flow at exactly its truth.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import model


@dataclasses.dataclass(frozen=True)
class BorderRouter:
    name: str
    address: str
    sampling_rate: int
    egress: bool          # exports egress records too
    classified: bool      # its interfaces carry a boundary (external / internal)
    external_if: int = 1  # the uplink (0: none, e.g. the core)


ROUTERS = (BorderRouter("border-a", "127.0.0.2", 1, True, True),
           BorderRouter("border-b", "127.0.0.3", 5, False, False),
           BorderRouter("border-c", "127.0.0.4", 10, False, True),
           BorderRouter("core", "127.0.0.9", 1, True, True, external_if=0))
BORDERS = 3  # the first three are border routers; the last is the core
TRANSFER_IF = 20  # a border router's interface towards the core
CORE_IFS = (30, 31)  # the core's interfaces towards the entry and the second border router


def params(**kw) -> model.ModelParams:
    """The model's parameters with the border's sampling rates on the three border routers."""
    p = model.ModelParams(**kw)
    p.routers = [dataclasses.replace(r, sampling_rate=ROUTERS[i].sampling_rate) for i, r in enumerate(p.routers)]
    return p


def observations(truth, second_every: int = 3):
    """(observations, per-observation entry index) from `truth` (a pyarrow table of
    lake_rows.lake_table over params()' flows, one row per flow). The observations have the
    lake's columns plus flow_direction, exporter_name, in/out_if_name and in/out_if_boundary
    (as the ingest fills them from the interface rules), and `truth_row`: the flow's row in
    `truth`."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
    import pyarrow.compute as pc  # noqa: PLC0415  (start-up: pyarrow)

    n = truth.num_rows
    by_addr = {r.address: i for i, r in enumerate(ROUTERS)}
    entry = np.array([by_addr[x] for x in truth.column("exporter").to_pylist()], np.int64)
    if (entry >= BORDERS).any():
        raise ValueError("border.observations: truth flows must enter at border-a, -b or -c")
    inbound = truth.column("input_if").to_numpy() == 1  # the model's uplink (Router.uplink_if)
    rows = np.arange(n)
    second = (rows % second_every) == 0 if second_every else np.zeros(n, bool)
    packets = truth.column("packets").to_numpy()
    nbytes = truth.column("bytes").to_numpy()
    parts = []

    def add(idx, router: int, direction: int, in_if, out_if, scale_from):
        r = ROUTERS[router]
        p, b = packets[idx], nbytes[idx]
        coarse = r.sampling_rate > scale_from[idx]
        if coarse.any():  # coarser sampling than the entry router: an estimate of its own
            p = np.where(coarse, (p // r.sampling_rate) * r.sampling_rate, p)
            b = np.where(coarse, (b // r.sampling_rate) * r.sampling_rate, b)
        seen = p > 0
        idx, p, b, in_if, out_if = idx[seen], p[seen], b[seen], in_if[seen], out_if[seen]
        parts.append((idx, router, direction, in_if, out_if, p, b))

    rate_of_entry = np.array([ROUTERS[i].sampling_rate for i in range(BORDERS)], np.int64)[entry]
    in_if = truth.column("input_if").to_numpy()
    out_if = truth.column("output_if").to_numpy()
    for e in range(BORDERS):
        sel = rows[entry == e]
        # the entry router: in the truth's interfaces (uplink external, LAN internal)
        a_in, a_out = in_if[sel], out_if[sel]
        crossing = second[sel]
        # a flow crossing a second border router reaches the entry router through the core
        a_in = np.where(crossing & ~inbound[sel], TRANSFER_IF, a_in)
        a_out = np.where(crossing & inbound[sel], TRANSFER_IF, a_out)
        add(sel, e, 0, a_in, a_out, np.full(n, ROUTERS[e].sampling_rate))
        if ROUTERS[e].egress:
            add(sel, e, 1, a_in, a_out, np.full(n, ROUTERS[e].sampling_rate))
        x = (e + 1) % BORDERS
        cs = sel[crossing]
        inb = inbound[cs]
        lan_in, lan_out = in_if[cs], out_if[cs]
        # core: from the entry router to the second one (inbound), or back (outbound)
        core_in = np.where(inb, CORE_IFS[0], CORE_IFS[1])
        core_out = np.where(inb, CORE_IFS[1], CORE_IFS[0])
        for d in (0, 1):
            add(cs, BORDERS, d, core_in, core_out, rate_of_entry)
        # the second border router: between the core and the local network, internal both sides
        x_in = np.where(inb, TRANSFER_IF, lan_in)
        x_out = np.where(inb, lan_out, TRANSFER_IF)
        add(cs, x, 0, x_in, x_out, rate_of_entry)
        if ROUTERS[x].egress:
            add(cs, x, 1, x_in, x_out, rate_of_entry)

    idx = np.concatenate([p[0] for p in parts])
    router = np.concatenate([np.full(len(p[0]), p[1]) for p in parts])
    direction = np.concatenate([np.full(len(p[0]), p[2]) for p in parts])
    obs = truth.take(pa.array(idx))
    names = {c: i for i, c in enumerate(obs.column_names)}

    def put(col: str, values, typ):
        nonlocal obs
        arr = pa.array(values, typ)
        if col in names:
            obs = obs.set_column(names[col], col, arr)
        else:
            obs = obs.append_column(col, arr)
            names[col] = obs.num_columns - 1

    rates = np.array([r.sampling_rate for r in ROUTERS], np.int32)[router]
    put("exporter", np.array([r.address for r in ROUTERS], dtype=object)[router], pa.string())
    put("input_if", np.concatenate([p[3] for p in parts]).astype(np.int64), pa.int64())
    put("output_if", np.concatenate([p[4] for p in parts]).astype(np.int64), pa.int64())
    put("packets", np.concatenate([p[5] for p in parts]).astype(np.int64), pa.int64())
    put("bytes", np.concatenate([p[6] for p in parts]).astype(np.int64), pa.int64())
    put("sampling_rate", rates, pa.int32())
    put("flow_direction", direction.astype(np.int32), pa.int32())
    put("exporter_name", np.array([r.name for r in ROUTERS], dtype=object)[router], pa.string())
    for side in ("in", "out"):
        ifs = obs.column("input_if" if side == "in" else "output_if").to_numpy()
        classified = np.array([r.classified for r in ROUTERS])[router]
        ext = np.array([r.external_if for r in ROUTERS])[router]
        boundary = np.where(~classified, "", np.where(ifs == ext, "external", "internal"))
        put(f"{side}_if_boundary", boundary.astype(object), pa.string())
        put(f"{side}_if_name", np.where(~classified, "", np.char.add("if", ifs.astype(str))).astype(object),
            pa.string())
    put("file_seq", np.arange(obs.num_rows, dtype=np.int64), pa.int64())
    put("truth_row", idx.astype(np.int64), pa.int64())
    order = pc.sort_indices(obs, [("time_start", "ascending"), ("truth_row", "ascending")])
    return obs.take(order)


def truth_totals(truth) -> dict:
    """Each flow once: flows, packets, bytes of the truth table."""
    import pyarrow.compute as pc  # noqa: PLC0415  (start-up: pyarrow)

    return {"flows": truth.num_rows, "packets": int(pc.sum(truth.column("packets")).as_py()),
            "bytes": int(pc.sum(truth.column("bytes")).as_py())}


def observed_totals(obs) -> dict:
    """Every observation summed (what `all` counts)."""
    return truth_totals(obs)
