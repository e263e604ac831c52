"""Where attacks go: the Delta table lake/attacks/ (schemas/attacks.py), the current attacks
for the mitigation half in $FLOWLAKE_HOME/state/ddos/attacks.json, and that half's answer
read back from state/ddos/mitigations.json.

attacks.json (issue 36's contract, written whole: tmp file + rename):
    {"updated": ISO, "attacks": [{"id", "victim", "attack_class", "protocol", "src_ports",
     "dst_ports", "peak_pps", "peak_bps", "started", "updated", "ended"}]}
with the open attacks and those ended in the last hour. mitigations.json (written by the
mitigation half): {"by_attack": {"<attack id>": "<status text>"}}; an attack it does not
name reads "none".
"""
from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

from flowlake.base import delta
from flowlake.schemas.attacks import ATTACKS
from flowlake.schemas.messages import arrow_schema

COLUMNS = ATTACKS.names
TIMES = [f.name for f in ATTACKS.fields if f.type == "timestamp_ms"]
LISTS = ("top_sources", "src_ports", "dst_ports", "countries", "exporters", "input_interfaces")
ENDED_KEPT_MS = 3600_000  # attacks.json keeps attacks ended within the last hour


def state_dir(cfg) -> Path:
    return cfg.path("state", "ddos")


def attacks_file(cfg) -> Path:
    return state_dir(cfg) / "attacks.json"


def mitigations_file(cfg) -> Path:
    return state_dir(cfg) / "mitigations.json"


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{int(ms) % 1000:03d}Z"


def day_of(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).date().isoformat()


def _ints(text: str | None) -> list[int]:
    return [int(p) for p in (text or "").split(",") if p.strip().lstrip("-").isdigit()]


def _texts(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def contract_entry(row: dict) -> dict:
    """One attack as attacks.json carries it."""
    return {"id": row["id"], "victim": row["victim"], "scope": row.get("scope", "host"),
            "attack_class": row["attack_class"], "protocol": int(row.get("protocol") or 0),
            "src_ports": _ints(row.get("src_ports")), "dst_ports": _ints(row.get("dst_ports")),
            "peak_pps": float(row.get("peak_pps") or 0.0), "peak_bps": float(row.get("peak_bps") or 0.0),
            "started": iso(row["started"]), "updated": iso(row["updated"]), "ended": iso(row.get("ended"))}


def write_current(cfg_or_path, rows: list[dict], now_ms: int) -> Path:
    """attacks.json: the open attacks and those ended within the last hour (of flow time,
    `now_ms` being the latest interval's end), atomically."""
    path = cfg_or_path if isinstance(cfg_or_path, Path) else attacks_file(cfg_or_path)
    keep = [r for r in rows if r.get("ended") is None or now_ms - r["ended"] <= ENDED_KEPT_MS]
    keep.sort(key=lambda r: (r["started"], r["id"]))
    doc = {"updated": iso(int(dt.datetime.now(dt.UTC).timestamp() * 1000)),
           "attacks": [contract_entry(r) for r in keep]}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)
    return path


def read_current(cfg) -> dict:
    try:
        doc = json.loads(attacks_file(cfg).read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def mitigations(cfg) -> dict[str, str]:
    """attack id -> the mitigation half's status text ({} when it wrote nothing readable)."""
    try:
        doc = json.loads(mitigations_file(cfg).read_text())
        by = doc.get("by_attack") if isinstance(doc, dict) else None
        return {str(k): str(v) for k, v in by.items()} if isinstance(by, dict) else {}
    except (OSError, ValueError):
        return {}


def public(row: dict, mitigation: str = "none") -> dict:
    """An attack as `flowlake attacks list|show --json` prints it."""
    out = {}
    for name in COLUMNS:
        if name == "date":
            continue
        v = row.get(name)
        if name in TIMES:
            v = iso(v)
        elif name in ("src_ports", "dst_ports"):
            v = _ints(v)
        elif name in LISTS:
            v = _texts(v)
        out[name] = v
    out["state"] = "open" if row.get("ended") is None else "ended"
    out["mitigation"] = mitigation
    return out


class AttackStore:
    """lake/attacks/: a Delta table partitioned by date (the day an attack started). Small
    (an attack is one row): a changed day is replaced whole in one commit."""

    def __init__(self, lake: Path):
        self.root = Path(lake) / "attacks"
        self.schema = arrow_schema(ATTACKS)

    @classmethod
    def from_config(cls, cfg) -> AttackStore:
        return cls(cfg.lake)

    def _table(self):
        return delta.ensure_table(self.root, self.schema, ["date"])

    def exists(self) -> bool:
        return (self.root / "_delta_log").is_dir()

    def read(self, day: str | None = None) -> list[dict]:
        if not self.exists():
            return []
        import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
        import pyarrow.dataset as pads  # noqa: PLC0415  (start-up: pyarrow)

        dl = delta._deltalake()
        table = dl.DeltaTable(str(self.root))
        files = table.file_uris(partition_filters=[("date", "=", day)] if day else None)
        if not files:
            return []
        data = pads.dataset(files, format="parquet", partitioning="hive").to_table()
        rows = []
        cols = {}
        for name in COLUMNS:
            if name == "date":
                continue
            if name not in data.column_names:
                cols[name] = [None] * data.num_rows
            elif name in TIMES:  # Delta keeps timestamps in microseconds
                col = data[name]
                cols[name] = col.cast(pa.timestamp("ms", tz=col.type.tz)).cast(pa.int64()).to_pylist()
            else:
                cols[name] = data[name].to_pylist()
        for vals in zip(*cols.values(), strict=True):
            r = dict(zip(cols.keys(), vals, strict=True))
            r["date"] = day_of(r["started"])
            rows.append(r)
        return rows

    def save(self, changed: list[dict]) -> None:
        """Merge these attacks (by id) into their days, one commit per day."""
        import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

        by_day: dict[str, list[dict]] = {}
        for a in changed:
            by_day.setdefault(day_of(a["started"]), []).append(a)
        for day, rows in by_day.items():
            table = self._table()
            ids = {a["id"] for a in rows}
            merged = [r for r in self.read(day) if r["id"] not in ids] + rows
            merged.sort(key=lambda r: (r["started"], r["id"]))
            data = pa.table({n: pa.array([day if n == "date" else r.get(n) for r in merged],
                                         self.schema.field(n).type) for n in COLUMNS}, schema=self.schema)
            delta.replace_partition(self.root, data, {"date": day}, table.version(), partition_by=["date"])

    def find(self, attack_id: str) -> dict | None:
        for row in self.read():
            if row["id"] == attack_id or (len(attack_id) >= 4 and row["id"].startswith(attack_id)):
                return row
        return None


def status(cfg) -> dict:
    """For `flowlake status`: attacks open and ended in the last hour, from attacks.json (no
    lake read: the detector rewrites it after every interval), with their mitigation."""
    doc = read_current(cfg)
    mit = mitigations(cfg)
    rows = [a for a in doc.get("attacks") or [] if isinstance(a, dict)]
    open_ = [{"id": a.get("id"), "victim": a.get("victim"), "attack_class": a.get("attack_class"),
              "peak_pps": a.get("peak_pps"), "peak_bps": a.get("peak_bps"), "started": a.get("started"),
              "mitigation": mit.get(str(a.get("id")), "none")} for a in rows if a.get("ended") is None]
    return {"enabled": bool(cfg.ddos.enabled), "updated": doc.get("updated"), "open": open_,
            "ended_last_hour": sum(1 for a in rows if a.get("ended") is not None)}


def print_status(console, st: dict) -> None:
    if not st.get("enabled"):
        console.print("attacks: detection disabled ([ddos] enabled = false)")
        return
    n = len(st["open"])
    colour = "bold red" if n else "green"
    console.print(f"attacks: [{colour}]{n} open[/], {st['ended_last_hour']} ended in the last hour "
                  f"(detector last wrote {st.get('updated') or 'never'})")
    for a in st["open"][:10]:
        console.print(f"  {a['id']} {a['victim']} {a['attack_class']}: {a['peak_pps'] or 0:,.0f} pkt/s, "
                      f"{(a['peak_bps'] or 0) / 1e6:,.1f} Mbit/s peak since {a['started']}; "
                      f"mitigation {a['mitigation']}")
