"""The ingest driver's side of enrichment: the configured files, checked, snapshotted and
reloaded when they change, and the plan every Spark task of a micro-batch applies.

- ASN/geo databases and the networks file are copied to `state/enrich/<kind>-<sha>.<ext>`
  and checked there (every MMDB record read, every CSV line parsed) before a plan names
  them: a file replaced while running is picked up at the next micro-batch, and tasks
  only ever open a complete, checked copy that nobody rewrites.
- A changed file that fails its check is refused with the error in the log and in
  `flowlake status`; the previous snapshot stays in use, also across restarts
  (`state/enrich/status.json` remembers it). At start, a broken file with nothing before
  it, a bad networks line or a bad rule stop the ingest with the file and line named.
- The SNMP poller's cache file is re-read when its mtime changes (a bad one: the previous
  directory stays, with the error in status).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

from flowlake.base import config as _config

from . import classify, interfaces, mmdb, networks
from .apply import Plan

log = logging.getLogger("flowlake.enrich")

FILES = {"asn": ("asn_database", "mmdb"), "geo": ("geo_database", "mmdb"), "networks": ("networks", "csv")}


def state_dir(cfg) -> Path:
    return cfg.path("state", "enrich")


def status_file(cfg) -> Path:
    return state_dir(cfg) / "status.json"


def _stat(path: Path):
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino]


def _atomic_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _resolve(cfg, value: str) -> Path | None:
    if not value:
        return None
    p = Path(os.path.expanduser(value))
    return p if p.is_absolute() else (cfg.base_dir / p).resolve()


def check_config(cfg) -> None:
    """What must be right before the ingest starts: rules, static names, the networks file.
    Raises ConfigError naming the rule, key or file:line."""
    try:
        classify.parse_rules(cfg.enrich.interface_rules)
    except classify.RuleError as exc:
        raise _config.ConfigError(str(exc)) from None
    interfaces.read_static(cfg)
    path = _resolve(cfg, cfg.enrich.networks)
    if path is not None:
        try:
            networks.parse(path)
        except networks.NetworksError as exc:
            raise _config.ConfigError(f"[enrich] networks: {exc}") from None


class Sources:
    """Owned by the ingest driver; `plan()` before each micro-batch."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.enabled = bool(cfg.enrich.enabled)
        check_config(cfg)
        self.rules = tuple(cfg.enrich.interface_rules)
        self.rule_count = len(self.rules)
        self.static = interfaces.read_static(cfg)
        self.dir = state_dir(cfg)
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            before = json.loads(status_file(cfg).read_text())
        except (OSError, ValueError):
            before = {}
        self.state: dict = {}
        for kind, (key, _ext) in FILES.items():
            prev = (before.get("sources") or {}).get(kind) or {}
            path = _resolve(cfg, getattr(cfg.enrich, key))
            entry = {"config": key, "file": str(path) if path else "", "stat": None, "snapshot": "", "info": {},
                     "error": "", "error_at": "", "loaded_at": ""}
            # the previous run's snapshot of the same file stays in use until a good new one
            if path is not None and prev.get("file") == str(path) and prev.get("snapshot") \
                    and Path(prev["snapshot"]).exists():
                entry.update({k: prev[k] for k in ("snapshot", "info", "loaded_at")}, stat=prev.get("stat"))
            self.state[kind] = entry
        self.snmp = {"file": str(interfaces.snmp_file(cfg)), "stat": None, "data": {}, "error": "", "error_at": "",
                     "loaded_at": ""}
        if self.enabled:
            self._refresh(starting=True)
        else:
            self._write_status()

    # ---- files ---------------------------------------------------------------------------
    def _snapshot(self, kind: str, path: Path) -> tuple[str, dict]:
        """Copy, check, keep: (snapshot path, info). Raises DatabaseError / NetworksError."""
        ext = FILES[kind][1]
        tmp = self.dir / f".{kind}.{os.getpid()}.tmp"
        h = hashlib.sha256()
        try:
            with open(path, "rb") as src, open(tmp, "wb") as dst:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    h.update(chunk)
                    dst.write(chunk)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            err = mmdb.DatabaseError if ext == "mmdb" else networks.NetworksError
            raise err(f"{path}: cannot read: {exc.strerror}") from None
        try:
            if ext == "mmdb":
                info = mmdb.check(tmp, kind, name=str(path)).as_dict()
            else:
                info = {"networks": len(networks.parse(tmp, name=str(path)))}
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        info["file"] = str(path)
        info["sha256"] = h.hexdigest()[:16]
        final = self.dir / f"{kind}-{info['sha256']}.{ext}"
        os.replace(tmp, final)
        return str(final), info

    def _refresh(self, starting: bool = False) -> bool:
        changed = False
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for kind, entry in self.state.items():
            if not entry["file"]:
                continue
            path = Path(entry["file"])
            stat = _stat(path)
            if stat is not None and stat == entry["stat"] and entry["snapshot"]:
                continue
            if stat is not None and stat == entry.get("failed_stat"):
                continue  # the same broken file: said once
            try:
                if stat is None:
                    raise (mmdb.DatabaseError if kind != "networks" else networks.NetworksError)(
                        f"{path}: no such file")
                snapshot, info = self._snapshot(kind, path)
            except (mmdb.DatabaseError, networks.NetworksError) as exc:
                entry.update(error=str(exc), error_at=now, failed_stat=stat)
                if starting and not entry["snapshot"]:
                    raise _config.ConfigError(f"[enrich] {entry['config']}: {exc}") from None
                log.error("enrichment: %s refused (%s); %s", kind, exc,
                          f"still using {entry['info'].get('file')} of {entry['loaded_at']}" if entry["snapshot"]
                          else "none in use")
                changed = True
                continue
            old = entry["snapshot"]
            entry.update(snapshot=snapshot, info=info, stat=stat, error="", error_at="", loaded_at=now,
                         failed_stat=None)
            for stale in self.dir.glob(f"{kind}-*"):
                if str(stale) != snapshot:
                    stale.unlink(missing_ok=True)  # tasks holding it open keep reading it
            if old != snapshot:
                log.info("enrichment: %s %s loaded (%s)", kind, path, info)
            changed = True
        changed |= self._refresh_snmp(now)
        if changed or starting:
            self._write_status()
        return changed

    def _refresh_snmp(self, now: str) -> bool:
        path = Path(self.snmp["file"])
        stat = _stat(path)
        if stat == self.snmp["stat"]:
            return False
        self.snmp["stat"] = stat
        try:
            self.snmp["data"] = interfaces.read_snmp(path) if stat is not None else {}
            self.snmp.update(error="", loaded_at=now)
        except interfaces.InterfacesError as exc:
            self.snmp.update(error=str(exc), error_at=now)
            log.error("enrichment: SNMP interface cache refused (%s); the previous one stays in use", exc)
        return True

    # ---- what tasks get ------------------------------------------------------------------
    def plan(self) -> Plan | None:
        routing_socket, as_sources = self._routing()
        if not self.enabled:
            if not routing_socket:
                return None  # no enrichment, no routing: every column unknown, AS numbers as exported
            # routing without enrichment: the routing columns, the others unknown
            # the key names everything the plan carries: a reused worker keeps an Enricher
            # per key, and one of another home's socket would look up in a collector gone
            return Plan(key=f"routing-only {routing_socket} {','.join(as_sources)}", routing_socket=routing_socket,
                        as_sources=as_sources)
        self._refresh()
        parts = [self.state[k]["snapshot"] for k in FILES] + [repr(self.snmp["stat"]), repr(self.rules),
                                                              repr(sorted(self.static.items(), key=str)),
                                                              routing_socket, repr(as_sources)]
        key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
        return Plan(key=key, asn_path=self.state["asn"]["snapshot"], geo_path=self.state["geo"]["snapshot"],
                    networks_path=self.state["networks"]["snapshot"], rules=self.rules,
                    directory=interfaces.directory(self.snmp["data"], self.static),
                    refresh_dir=str(interfaces.refresh_dir(self.cfg)),
                    cache_entries=int(self.cfg.enrich.cache_entries),
                    routing_socket=routing_socket, as_sources=as_sources)

    def _routing(self) -> tuple[str, tuple[str, ...]]:
        """([routing] enabled: the collector's socket, else ''; [routing] as_sources)."""
        from flowlake.collectors.routing import service  # noqa: PLC0415  (start-up: only the driver)

        s = service.check(self.cfg)
        return (str(service.socket_path(self.cfg)) if s.enabled else ""), service.as_sources(s)

    def _write_status(self) -> None:
        sources = {k: {x: v for x, v in e.items() if x != "failed_stat"} for k, e in self.state.items()}
        snmp = {k: v for k, v in self.snmp.items() if k != "data"}
        snmp["exporters"] = len(self.snmp["data"])
        snmp["interfaces"] = sum(len(e["interfaces"]) for e in self.snmp["data"].values())
        snmp["errors"] = {a: e["error"] for a, e in self.snmp["data"].items() if e["error"]}
        _atomic_json(status_file(self.cfg), {
            "enabled": self.enabled, "sources": sources, "snmp": snmp, "rules": self.rule_count,
            "static_exporters": len(self.static),
            "static_interfaces": sum(len(e["interfaces"]) for e in self.static.values()),
            "written_at": time.time()})

