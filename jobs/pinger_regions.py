"""The PingER host-to-region map: a CSV with columns host, site, country, region
([pinger] regions). Hosts are matched case-insensitively on the text the active results
carry (a name or an address); a host not in the map is region 'unknown'."""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

COLUMNS = ("host", "site", "country", "region")
UNKNOWN = "unknown"


class RegionsError(ValueError):
    """The regions file is missing or malformed; the message names file and line."""


@dataclass
class Regions:
    path: Path | None
    hosts: dict[str, dict] = field(default_factory=dict)  # lower-cased host -> row

    def region(self, host: str | None) -> str:
        row = self.hosts.get((host or "").strip().lower())
        return row["region"] if row else UNKNOWN


def path_of(cfg) -> Path | None:
    raw = str(cfg.pinger.regions or "").strip()
    if not raw:
        return None
    p = Path(raw).expanduser()
    return p if p.is_absolute() else Path(cfg.base_dir) / p


def load(cfg) -> Regions:
    path = path_of(cfg)
    if path is None:
        return Regions(None)
    return read(path)


def read(path: Path) -> Regions:
    try:
        fh = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise RegionsError(f"[pinger] regions = {path}: cannot read: {exc.strerror}") from None
    out = Regions(Path(path))
    with fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise RegionsError(f"{path}:1: regions file lacks column(s) {', '.join(missing)} "
                               f"(needs {','.join(COLUMNS)}; has {','.join(header) or 'nothing'})")
        reader.fieldnames = header
        for line, row in enumerate(reader, start=2):
            vals = {c: (row.get(c) or "").strip() for c in COLUMNS}
            if not vals["host"] or not vals["region"]:
                raise RegionsError(f"{path}:{line}: host and region must not be empty")
            key = vals["host"].lower()
            if key in out.hosts and out.hosts[key]["region"] != vals["region"]:
                raise RegionsError(f"{path}:{line}: host {vals['host']} already mapped to region "
                                   f"{out.hosts[key]['region']!r}, here {vals['region']!r}")
            out.hosts[key] = vals
    return out
