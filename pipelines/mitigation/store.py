"""The mitigation's files: what it reads (state/ddos/attacks.json from the detector, the
operator's overrides.json), what it writes (state/ddos/mitigations.json: by_attack and its
status; ledger.json: the routes it put in the speaker) and its record in the lake
(`lake/mitigations/`, Delta, schemas/mitigations.py)."""
from __future__ import annotations

import datetime as dt
import getpass
import json
import os
from pathlib import Path

from flowlake.base import delta
from flowlake.schemas.messages import arrow_schema
from flowlake.schemas.mitigations import MITIGATIONS

# the detector's and the loop's shared files (the contract lives with the detector)
from ..alerts.attacks import attacks_file, mitigations_file, state_dir  # noqa: F401  (re-exported)

MAX_PENDING = 10000  # events kept for the lake while it cannot be written (the oldest dropped past this)




def overrides_file(cfg) -> Path:
    return state_dir(cfg) / "overrides.json"


def ledger_file(cfg) -> Path:
    return state_dir(cfg) / "ledger.json"


def write_json(path: Path, doc) -> None:
    """Whole or not at all (tmp file + rename): readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, path)


def read_attacks(cfg) -> tuple[list[dict], str]:
    """(attacks, error): the detector's current attacks; a missing file is no attack, a
    damaged one is an error naming the file (the caller keeps what is in force)."""
    attacks, error, _ = read_attacks_at(cfg)
    return attacks, error


def read_attacks_at(cfg) -> tuple[list[dict], str, float | None]:
    """(attacks, error, updated): read_attacks and when the detector last wrote the file
    (its "updated", wall clock, epoch seconds; the file's mtime when that is missing or
    the file is damaged; None without a file)."""
    path = attacks_file(cfg)
    try:
        text = path.read_text()
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        return [], "", None
    except OSError as exc:
        return [], f"{path}: unreadable ({exc})", None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return [], f"{path}: unreadable ({exc})", mtime
    attacks = doc.get("attacks") if isinstance(doc, dict) else None
    if not isinstance(attacks, list) or not all(isinstance(a, dict) for a in attacks):
        return [], f"{path}: expected {{\"updated\": ..., \"attacks\": [objects]}}", mtime
    updated = _epoch(doc.get("updated"))
    return attacks, "", mtime if updated is None else updated


def _epoch(text) -> float | None:
    try:
        t = dt.datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp()


def read_overrides(cfg) -> dict:
    try:
        doc = json.loads(overrides_file(cfg).read_text())
    except (OSError, ValueError):
        return {"announce": {}, "withdraw": []}
    return {"announce": dict(doc.get("announce") or {}), "withdraw": list(doc.get("withdraw") or [])}


def write_overrides(cfg, doc: dict) -> None:
    write_json(overrides_file(cfg), doc)


def read_ledger(cfg) -> dict:
    try:
        doc = json.loads(ledger_file(cfg).read_text())
    except (OSError, ValueError):
        doc = {}
    return {"routes": dict(doc.get("routes") or {}), "ended_seen": dict(doc.get("ended_seen") or {}),
            "refused": list(doc.get("refused") or []), "pending": list(doc.get("pending") or []),
            "statuses": dict(doc.get("statuses") or {})}


def read_status(cfg) -> dict:
    try:
        doc = json.loads(mitigations_file(cfg).read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return str(os.getuid())


def event(action: str, method: str, prefix: str, route: str, reason: str, *, attack_ids=(), origin: str = "auto",
          community: str | None = None, next_hop: str | None = None, neighbor: str = "", session: str = "",
          who: str = "flowlake", at: float | None = None) -> dict:
    """One row of lake/mitigations/ (schemas/mitigations.py)."""
    t = dt.datetime.now(dt.UTC) if at is None else dt.datetime.fromtimestamp(at, dt.UTC)
    return {"time": int(t.timestamp() * 1000), "action": action, "method": method, "prefix": prefix, "route": route,
            "attack_ids": ",".join(attack_ids), "origin": origin, "reason": reason, "community": community,
            "next_hop": next_hop, "neighbor": neighbor, "session": session, "user": who,
            "date": t.strftime("%Y-%m-%d")}


class EventStore:
    """lake/mitigations/: a Delta table partitioned by date, appended to (events are few)."""

    def __init__(self, lake: Path):
        self.root = Path(lake) / "mitigations"
        self.schema = arrow_schema(MITIGATIONS)

    @classmethod
    def from_config(cls, cfg) -> EventStore:
        return cls(cfg.lake)

    def append(self, rows: list[dict]) -> None:
        if not rows:
            return
        import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

        table = delta.ensure_table(self.root, self.schema, ["date"])
        data = pa.Table.from_pylist([{**r, "time": dt.datetime.fromtimestamp(r["time"] / 1000, dt.UTC)}
                                     for r in rows], schema=self.schema)
        delta._deltalake().write_deltalake(table, data, mode="append", partition_by=["date"])

    def read(self, limit: int | None = None) -> list[dict]:
        """Events, newest first (time as ms since epoch)."""
        dl = delta._deltalake()
        if not dl.DeltaTable.is_deltatable(str(self.root)):
            return []
        import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
        import pyarrow.dataset as pads  # noqa: PLC0415  (start-up: pyarrow)

        files = dl.DeltaTable(str(self.root)).file_uris()
        if not files:
            return []
        data = pads.dataset(files, format="parquet", partitioning="hive").to_table()
        col = data["time"]
        data = data.set_column(data.column_names.index("time"), "time",
                               col.cast(pa.timestamp("ms", tz=col.type.tz)).cast(pa.int64()))
        rows = sorted(data.to_pylist(), key=lambda r: r["time"], reverse=True)
        return rows[:limit] if limit else rows
