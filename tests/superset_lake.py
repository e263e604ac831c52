"""A small demo lake for the Superset tests, and the one Superset of the test run.

The lake follows the declared Records (flowlake.schemas.registry()): flows for two days
plus every report table that is declared, filled with plausible values by column name,
written with pyarrow under the test's FLOWLAKE_HOME.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DAYS = (dt.date(2026, 11, 20), dt.date(2026, 11, 21))
EXPORTERS = ("192.0.2.1", "192.0.2.2")
TARGETS = ("ping.example.net", "cern.example.org", "slac.example.edu")

ARROW = {"int": pa.int32(), "long": pa.int64(), "double": pa.float64(), "string": pa.string(),
         "boolean": pa.bool_(), "bytes": pa.binary(), "timestamp_ms": pa.timestamp("ms", tz="UTC"),
         "date": pa.date32(), "map_string_double": pa.map_(pa.string(), pa.float64()),
         "map_string_string": pa.map_(pa.string(), pa.string()), "array_double": pa.list_(pa.float64()),
         "array_int": pa.list_(pa.int32()), "array_long": pa.list_(pa.int64()), "array_string": pa.list_(pa.string())}

# Values chosen by column name so the dashboards' fixed filters (by=src, kind=daily, ...) match.
VOCAB = {
    "direction": ["all", "inbound", "outbound"], "by": ["src", "dst", "pair"],
    "metric": ["bytes", "packets", "flows"], "kind": ["ts", "daily"], "series": ["total", "interface", "proto"],
    "period": ["hour", "day", "month"], "flow_class": ["tcp", "udp", "icmp", "all"],
    "target": list(TARGETS), "exporter": list(EXPORTERS), "proto_name": ["TCP", "UDP", "ICMP"],
    "app": ["https", "bbftp", "GridFTP", "dns", "other"], "rtt_band": ["0-64", "64-128", "White", "Pink"],
    "loss_band": ["0-0.1%", "0.1-1%", "excellent", "acceptable"], "ipdv_band": ["good", "medium", "bad"],
    "month": ["2026-10", "2026-11"], "src_region": ["North America", "Europe"],
    "dst_region": ["North America", "Europe", "East Asia", "unknown"], "reason": ["thresholds", "port"],
    "path": ["path-a", "path-b"], "path_a": ["path-a"], "path_b": ["path-b"], "best_path": ["path-a", "path-b"],
    "test_type": ["rtt", "throughput"], "tool": ["ping", "iperf3"], "source": ["probe1"],
    "destination": list(TARGETS), "class": ["tcp_in", "tcp_out", "udp"], "flow_direction": ["inbound", "outbound"],
    "dimension": ["as", "country", "interface", "provider", "network"],
    "side": ["in", "out"], "level": ["domain", "tld"], "section": ["class", "app"],
    "duration_class": ["all", "0-1 s", "1-10 s", "10-60 s", "1-5 min"],
    "detector": ["scan", "fan_in", "exporter_silent"], "severity": ["warning", "critical"],  # lake/alerts
    "state": ["open", "acknowledged", "resolved"],
    "status_class": ["forwarded", "dropped", "consumed", "not exported"],  # forwarding_status
    "reason_name": ["ACL deny", "bad TTL", "policer", "unroutable"],
    "value_label": ["label 16004", "label 24001", "vrf 7", "(none)"],  # mpls_vrf_mix
    "attack_class": ["amplification", "syn", "udp", "total"], "scope": ["host", "prefix"],  # lake/attacks
    "action": ["announce", "withdraw", "failed", "dry-run-announce"], "method": ["rtbh", "flowspec"],  # mitigations
    "origin": ["auto", "operator"],
}
# Tables whose `side` is not vlan_mix's in/out.
SIDES = {"mpls_vrf_mix": ["mpls", "vrf_in", "vrf_out"]}
# Tables whose `dimension` is not enriched_top's (schemas/peering.py).
DIMENSIONS = {"peering_traffic": ["neighbour_as", "transit", "origin_as", "community", "provider"]}
# Enrichment of the demo flows (schemas/enrich.py), by exporter and interface index.
EXPORTER_NAMES = {"192.0.2.1": "border-1", "192.0.2.2": "border-2"}
INTERFACES = {1: ("et-0/0/1", "Transit: Cogent 1-38", 100000, "external", "transit", "cogent"),
              2: ("et-0/0/2", "IX: AMS-IX lan", 100000, "external", "ix", "ams-ix"),
              3: ("xe-1/0/3", "campus core", 40000, "internal", "core", ""),
              4: ("xe-1/0/4", "physics lab", 10000, "internal", "core", "")}


def _addr(rng, n, local_share=0.5):
    local = rng.random(n) < local_share
    base_local = int(ipaddress.ip_address("10.1.0.0"))
    base_remote = int(ipaddress.ip_address("203.0.113.0"))
    nums = np.where(local, base_local + rng.integers(1, 4000, n), base_remote + rng.integers(1, 250, n))
    return [str(ipaddress.ip_address(int(x))) for x in nums]


def write_flows(lake: Path, flows_per_day: int = 20000, seed: int = 7) -> int:
    from flowlake.schemas import FLOWS_TABLE

    rng = np.random.default_rng(seed)
    schema = pa.schema([(f.name, ARROW[f.type]) for f in FLOWS_TABLE.fields if f.name not in ("date", "hour")])
    total = 0
    for day in DAYS:
        n = flows_per_day
        start0 = int(dt.datetime.combine(day, dt.time(), dt.timezone.utc).timestamp() * 1000)
        t = np.sort(start0 + rng.integers(0, 86_400_000, n))
        proto = rng.choice([6, 17, 1], n, p=[0.7, 0.25, 0.05])
        size = np.floor(40 * (1 + rng.pareto(1.2, n))).astype(np.int64)  # heavy-tailed bytes
        cols = {
            "time_start": t, "time_end": t + rng.integers(0, 60_000, n),
            "exporter": rng.choice(EXPORTERS, n), "input_if": rng.integers(1, 3, n), "output_if": rng.integers(3, 5, n),
            "src_addr": _addr(rng, n), "dst_addr": _addr(rng, n), "src_port": rng.integers(1024, 65535, n),
            "dst_port": rng.choice([443, 80, 53, 5021, 2811], n), "proto": proto, "tcp_flags": np.where(proto == 6, 27, 0),
            "tos": np.zeros(n, dtype=np.int64), "packets": np.maximum(1, size // 800), "bytes": size,
            "sampling_rate": np.ones(n, dtype=np.int64), "src_as": rng.integers(1, 65000, n),
            "dst_as": rng.integers(1, 65000, n), "source_file": ["nfcapd.demo"] * n, "file_seq": np.arange(n),
            "run_id": [""] * n,  # no lab run
            "src_vlan": rng.choice([0, 100, 210, 211], n), "dst_vlan": rng.choice([0, 100, 210, 211], n),
        }
        cols.update(_enrichment(cols, rng, n))
        # columns not drawn here (flow record revision 3's) are null, as in a lake from before them
        table = pa.table({k: pa.array(cols[k]).cast(schema.field(k).type) if k in cols else pa.nulls(n, schema.field(k).type)
                          for k in schema.names}, schema=schema)
        hours = (t - start0) // 3_600_000
        for h in np.unique(hours):
            part = lake / "flows" / f"date={day.isoformat()}" / f"hour={int(h):02d}"
            part.mkdir(parents=True, exist_ok=True)
            pq.write_table(table.filter(pa.array(hours == h)), part / "part-0.parquet")
        total += n
    return total


def _enrichment(cols: dict, rng, n: int) -> dict:
    """The enrichment columns as the ingest would fill them for the demo's exporters,
    interfaces and addresses (10.1/16 local: the campus; others abroad)."""
    out = {"exporter_name": [EXPORTER_NAMES[e] for e in cols["exporter"]]}
    for side, col in (("in", "input_if"), ("out", "output_if")):
        ifs = [INTERFACES[int(i)] for i in cols[col]]
        for k, name in enumerate(("name", "description", "speed", "boundary", "connectivity", "provider")):
            out[f"{side}_if_{name}"] = [i[k] for i in ifs]
    for side in ("src", "dst"):
        local = [a.startswith("10.") for a in cols[f"{side}_addr"]]
        abroad = rng.choice(["DE", "FR", "JP", "BR", ""], n)
        out[f"{side}_country"] = ["US" if loc else str(c) for loc, c in zip(local, abroad)]
        out[f"{side}_city"] = ["Menlo Park" if loc else "" for loc in local]
        for k, v in (("name", "campus"), ("role", "internal"), ("site", "slac"), ("region", "us-west"), ("tenant", "doe")):
            out[f"{side}_net_{k}"] = [v if loc else "" for loc in local]
    return out


def _column(f, n, rng, day):
    day0 = int(dt.datetime.combine(day, dt.time(), dt.timezone.utc).timestamp() * 1000)
    if f.name in VOCAB and f.type == "string":  # a name shared with another table's number (reason) is a number
        return [str(x) for x in rng.choice(VOCAB[f.name], n)]
    if f.name == "hour":
        return [None if rng.random() < 0.5 else int(rng.integers(0, 24)) for _ in range(n)]
    if f.name in ("version", "observation_domain"):  # exporter_health: a few export processes per router
        return [int(x) for x in rng.choice([9, 10] if f.name == "version" else [0, 7], n)]
    if f.name == "rank":  # top-N lists: ranks 1..20, as the jobs write them
        return [int(x) for x in rng.integers(1, 21, n)]
    if f.type == "timestamp_ms":
        return [dt.datetime.fromtimestamp(int(x) / 1000, dt.timezone.utc) for x in day0 + rng.integers(0, 86_400_000, n)]
    if f.type in ("int", "long"):
        return [int(x) for x in rng.integers(1, 1000, n)]
    if f.type == "double":
        if "loss" in f.name or "share" in f.name or f.name in ("p_value", "utilisation", "reachability", "r2", "gain"):
            return [float(x) for x in rng.random(n) * 0.05]
        return [float(x) for x in rng.random(n) * 1e6 + 1]
    if f.name == "insufficient":  # mostly real fits
        return [bool(x) for x in rng.random(n) < 0.1]
    if f.type == "boolean":
        return [bool(x) for x in rng.random(n) < 0.5]
    if f.type == "string":
        return [f"{f.name}-{i % 7}" for i in range(n)]
    if f.type == "array_double":  # CCDF points as the jobs write them: x on a log grid, 4 a decade
        if f.name.endswith("_x"):
            return [[10 ** (2 + i / 4) for i in range(8)] for _ in range(n)]
        return [sorted((float(x) for x in rng.random(8)), reverse=True) for _ in range(n)]
    if f.type == "array_int":  # MPLS stacks: none, or 1-3 labels
        return [[int(x) for x in rng.integers(16, 1 << 20, int(k))] or None for k in rng.integers(0, 4, n)]
    if f.type == "map_string_double":
        return [{"rtt_ms": float(rng.random() * 100)} for _ in range(n)]
    if f.type == "map_string_string":
        return [{"count": "10"} for _ in range(n)]
    raise ValueError(f"no demo value for {f.name} ({f.type})")


def _coherent(cols: dict) -> dict:
    """Columns drawn independently, made to agree where a reader would notice: an alert
    starts before it is updated and ends after both (no negative durations on the dashboard)."""
    times = [c for c in ("started", "updated", "ended") if c in cols]
    if len(times) > 1:
        for i, row in enumerate(zip(*(cols[c] for c in times))):
            for c, t in zip(times, sorted(row)):
                cols[c][i] = t
    if "state" in cols and "ended" in cols:  # only resolved alerts have ended
        cols["ended"] = [t if s == "resolved" else None for t, s in zip(cols["ended"], cols["state"])]
    if "attack_class" in cols and "ended" in cols:  # a few attacks still open
        cols["ended"] = [None if i % 10 == 0 else t for i, t in enumerate(cols["ended"])]
    return cols


def write_reports(lake: Path, rows: int = 600, seed: int = 11) -> list[str]:
    """Every declared report table (and `active`), two dates, `rows` rows each."""
    from flowlake.jobs.behaviour_classes import CLASSES as BEHAVIOUR_CLASSES
    from flowlake.schemas import registry

    rng = np.random.default_rng(seed)
    written = []
    for name, rec in sorted(registry().items()):
        if not rec.fields or rec.fields[-1].name != "date" or rec.namespace == "flowlake.v1" or name == "flows":
            continue
        if rec.namespace == "flowlake.rollups":  # computed from the flows: write_rollups()
            continue
        base = lake / (name if rec.namespace == "flowlake.pipelines.lake" else f"reports/{name}")
        fields = [f for f in rec.fields if f.name != "date"]
        schema = pa.schema([(f.name, ARROW[f.type]) for f in fields])
        for day in DAYS:
            cols = _coherent({f.name: _column(f, rows, rng, day) for f in fields})
            if name in ("behaviour_classes", "behaviour_needs"):  # the EVL classes, real-time ones included
                cols["class"] = [BEHAVIOUR_CLASSES[i % len(BEHAVIOUR_CLASSES)] for i in range(rows)]
            if name in SIDES:
                cols["side"] = [SIDES[name][i % len(SIDES[name])] for i in range(rows)]
            if name in DIMENSIONS:
                cols["dimension"] = [DIMENSIONS[name][i % len(DIMENSIONS[name])] for i in range(rows)]
            data = {f.name: pa.array(cols[f.name], type=ARROW[f.type]) for f in fields}
            part = base / f"date={day.isoformat()}"
            part.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table(data, schema=schema), part / "part-0.parquet")
        written.append(name)
    return written


def write_experiments(lake: Path, seed: int = 5) -> int:
    """lake/experiments as `flowlake lab run` leaves it for the example studies' grids (two
    repetitions), with figures from a simple model: the dashboard's filters on kind and
    metric must meet real grid values. Replaces the generic rows write_reports wrote."""
    import shutil

    from flowlake.collectors.lab import results
    from flowlake.collectors.lab.spec import load
    from flowlake.schemas.experiments import EXPERIMENTS

    rng = np.random.default_rng(seed)
    examples = Path(__file__).resolve().parent.parent / "examples" / "lab"
    rows = []
    t0 = int(dt.datetime.combine(DAYS[1], dt.time(9), dt.timezone.utc).timestamp() * 1000)
    for name in ("paced.toml", "datatag.toml", "pbpd.toml"):
        for i, run in enumerate(r for r in load(examples / name).runs if r.params["protocol"] != "sctp"):
            p = run.params
            loss = run.condition.loss_percent / 100
            size = float(p["message_size"] or 0)
            figures = {
                "paced": lambda: {"achieved_rate": p["rate"] * (1 - loss), "max_inter_frame_delay": 1000 / p["rate"]
                                  * (1 + rng.random()) + (2000 if run.condition.flap_down_s else 0),
                                  "missed_deadlines": rng.integers(0, 20) * (1 + p["frame_size"] / 1000),
                                  "latency_p50": 0.2 + rng.random(), "loss": loss},
                "bulk": lambda: {"throughput": 9e7 * (1 - 5 * loss) * (1 + 0.05 * rng.random()), "rtt": 20.0,
                                 "loss": loss + 1e-4, "mathis_bound": 1460 * 8 / 0.02 * 1.22 / (loss + 1e-4) ** 0.5},
                "probe": lambda: {"latency": 0.2 + size * (8 / 4e4 if p["path"] == "a" else 8 / 1e4) / 1000},
                "split": lambda: {"latency": 0.3 + size * 8 / 5e4 / 1000, "predicted_latency": 0.2 + size * 8 / 5e4 / 1000},
            }[run.kind]()
            rows += results.rows(run, figures, t0 + i * 7000, t0 + i * 7000 + 6000)
    out = lake / "experiments"
    shutil.rmtree(out, ignore_errors=True)
    schema = pa.schema([(f.name, ARROW[f.type]) for f in EXPERIMENTS.fields if f.name != "date"])
    part = out / f"date={DAYS[1].isoformat()}"
    part.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), part / "part-0.parquet")
    return len(rows)


def write_rollups(cfg) -> dict:
    """The rollups of the demo flows, as hour close computes them (real, consistent data)."""
    from flowlake.pipelines import rollups

    con = rollups.connect()
    import lake_sql  # the table's current files (tests/lake_sql.py: never a glob of lake/flows)

    con.execute(f"CREATE TEMP VIEW demo_flows AS SELECT * FROM {lake_sql.source(cfg.lake)}")
    return rollups.write_days(cfg, "demo_flows", con)


COVERAGE = {("192.0.2.2", 2): 0.5}  # the demo's one interface whose flows miss half its traffic


def write_interface_capacity(cfg) -> dict:
    """SNMP counters consistent with the demo flows (each interface's counters saw its flows'
    bytes / 0.97, polled every 5 minutes; one interface / 0.5), deltas by the poller's own
    code, then the interface_capacity job over them: real utilisation and coverage tables."""
    import shutil

    import duckdb

    from flowlake.collectors.snmp import deltas, store
    from flowlake.jobs.context import JobContext
    from flowlake.jobs.interface_capacity import run

    lake = cfg.lake
    import lake_sql  # the table's current files (tests/lake_sql.py: never a glob of lake/flows)

    flows = lake_sql.source(lake)
    per = duckdb.sql(f"""SELECT exporter, side, if_index, epoch_ms(time_start) // 300000 AS b, sum(bytes) AS bytes
        FROM (SELECT exporter, 'in_octets' AS side, input_if AS if_index, time_start, bytes FROM {flows}
              UNION ALL SELECT exporter, 'out_octets', output_if, time_start, bytes FROM {flows})
        GROUP BY ALL""").fetchall()
    moved: dict = {}
    for exporter, side, idx, b, nbytes in per:
        moved.setdefault(exporter, {}).setdefault(int(b), {}).setdefault(int(idx), {})[side] = \
            nbytes / COVERAGE.get((exporter, int(idx)), 0.97)
    shutil.rmtree(lake / "interface_counters", ignore_errors=True)  # write_reports' random rows
    rows_by_day: dict = {}
    for exporter, buckets in moved.items():
        raw = {i: {"in_octets": 0, "out_octets": 0} for i in (1, 2, 3, 4)}
        first = int(dt.datetime.combine(DAYS[0], dt.time(), dt.timezone.utc).timestamp() * 1000) // 300_000
        prev = None
        for b in range(first, first + 288 * len(DAYS) + 1):  # a poll at every 5-minute boundary
            for idx, sides in buckets.get(b - 1, {}).items():  # the bytes of the bucket that just ended
                for side, v in sides.items():
                    raw[idx][side] += int(v)
            cur = {"time_ms": b * 300_000, "sys_uptime_cs": (b - first) * 30_000 + 100,
                   "counters": {i: dict(c) for i, c in raw.items()}}
            for r in deltas.rows(prev, cur):
                r.update(time=dt.datetime.fromtimestamp(cur["time_ms"] / 1000, dt.timezone.utc), exporter=exporter,
                         if_name=f"xe-0/0/{r['if_index']}", speed_mbps=1, oper_status=1)
                rows_by_day.setdefault(r["time"].date(), []).append(r)
            prev = cur
    for day, rows in rows_by_day.items():
        part = lake / "interface_counters" / f"date={day.isoformat()}"
        part.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=store.file_schema()), part / "demo.parquet")
    out = {}
    for day in DAYS:
        ctx = JobContext(spark=None, cfg=cfg, date=day)
        run(ctx)
        out[day.isoformat()] = sum(1 for _ in (lake / "reports" / "flow_coverage" / f"date={day}").glob("*.parquet"))
    return out


# ---- the one Superset of the test run ---------------------------------------------------
_STATE: dict = {}


def superset_up(cfg, pytest_config=None) -> dict:
    """Demo lake + Superset started and provisioned once per test run (slow: ~1-2 min).
    Stopped when the pytest session ends (unless FLOWLAKE_KEEP_SUPERSET=1)."""
    if "creds" not in _STATE:
        import os

        from flowlake import superset_cli

        if pytest_config is not None and os.environ.get("FLOWLAKE_KEEP_SUPERSET") != "1":
            pytest_config.add_cleanup(lambda: superset_down(cfg))

        lake = cfg.lake
        _STATE["flows"] = write_flows(lake)
        _STATE["tables"] = write_reports(lake)
        _STATE["experiments"] = write_experiments(lake)
        _STATE["rollups"] = write_rollups(cfg)
        _STATE["interface_capacity"] = write_interface_capacity(cfg)
        superset_cli.start(cfg)
        _STATE["provision"] = superset_cli.provision(cfg)
        _STATE["creds"] = superset_cli.credentials(cfg)
    return _STATE


def superset_down(cfg) -> None:
    if _STATE.pop("creds", None) is not None:
        from flowlake import superset_cli

        superset_cli.stop(cfg)
