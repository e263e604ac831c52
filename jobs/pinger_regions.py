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


STATUS_NAMES = 20  # unknown hosts named in status at most (the count is always whole)


def status(cfg) -> dict:
    """`flowlake status`: the regions file and how many hosts of the newest day of active
    results it maps. Never raises (an error is reported in the dict)."""
    out = {"regions_file": str(path_of(cfg) or ""), "hosts_in_file": 0, "date": None,
           "hosts_seen": 0, "mapped": 0, "unknown": 0, "unknown_hosts": []}
    try:
        regions = load(cfg)
        out["hosts_in_file"] = len(regions.hosts)
        from flowlake.pipelines.lake_read import lake_files  # noqa: PLC0415  (start-up: the seam)

        by_day: dict[str, list[str]] = {}  # the table's current files (a Delta table: never a glob)
        for f in lake_files(cfg.lake, "active")[1]:
            by_day.setdefault(Path(f).parent.name, []).append(f)
        days = sorted(d for d in by_day if d.startswith("date="))
        if not days:
            return out
        import pyarrow.dataset as ds  # noqa: PLC0415  (start-up: pyarrow)

        table = ds.dataset(by_day[days[-1]], format="parquet").to_table(columns=["source", "destination"])
        hosts = {h for col in ("source", "destination") for h in table.column(col).to_pylist() if h}
        unknown = sorted(h for h in hosts if h.strip().lower() not in regions.hosts)
        out.update(date=days[-1].split("=", 1)[1], hosts_seen=len(hosts), mapped=len(hosts) - len(unknown),
                   unknown=len(unknown), unknown_hosts=unknown[:STATUS_NAMES])
    except Exception as exc:  # status must never crash on a bad file or lake
        out["error"] = str(exc)
    return out


def status_line(st: dict) -> str:
    if st.get("error"):
        return f"[red]pinger regions: {st['error']}[/red]"
    src = st["regions_file"] or "not set (\\[pinger] regions)"  # "\\[": a literal bracket in rich markup
    line = f"pinger regions: {src}, {st['hosts_in_file']} hosts"
    if st["date"]:
        line += f"; active results of {st['date']}: {st['mapped']} of {st['hosts_seen']} hosts mapped"
        if st["unknown"]:
            more = st["unknown"] - len(st["unknown_hosts"])
            line += (f", [yellow]{st['unknown']} unknown[/yellow] ({', '.join(st['unknown_hosts'])}"
                     + (f" and {more} more" if more > 0 else "") + ")")
    return line
