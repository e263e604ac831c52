"""Exporter and interface names: the SNMP poller's cache file and static definitions in
flowlake.toml, static winning field by field.

The poller (collectors/snmp/, developer `snmp`) writes, atomically,
`$FLOWLAKE_HOME/state/snmp/interfaces.json`:
    {"version": 1, "exporters": {"<exporter address as in the flows>": {
        "sys_name": "border-1", "polled": "<ISO-8601 UTC>", "error": "",
        "interfaces": {"<ifIndex>": {"name": "eth0", "description": "<ifAlias>",
                                     "speed_mbps": 10000, "oper_status": 1}}}}}
and refreshes an exporter when `state/snmp/refresh/<address>` (':' -> '_') appears: the
ingest creates that empty file when flows name an ifIndex nobody knows, at most once per
exporter per REFRESH_EVERY_S.

Static, beside the exporter's sampling settings:
    [exporters."192.0.2.1"]
    name = "border-1"
    [exporters."192.0.2.1".interfaces.3]
    name = "et-0/0/1"
    description = "Transit: Cogent 1-3834938493"
    speed_mbps = 100000
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from flowlake.base import config as _config
from flowlake.collectors.snmp import store as snmp_store

SNMP_VERSION = 1
REFRESH_EVERY_S = 60.0
IF_KEYS = ("name", "description", "speed_mbps")
# (name, description, speed in Mbit/s) of an interface nobody knows.
UNKNOWN = ("", "", 0)


# The poller owns the contract's paths and names (collectors/snmp/store.py): one definition.
snmp_file = snmp_store.interfaces_file
refresh_dir = snmp_store.refresh_dir
refresh_name = snmp_store.safe_name


class InterfacesError(ValueError):
    """The SNMP cache file or a static definition is malformed; the message names it."""


def read_snmp(path: Path) -> dict:
    """{exporter: {"sys_name", "error", "polled", "interfaces": {ifindex int: (name, descr, speed)}}};
    {} when the file does not exist (no poller). InterfacesError when it does not parse."""
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InterfacesError(f"{path}: not readable JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.get("version") != SNMP_VERSION or not isinstance(raw.get("exporters"), dict):
        raise InterfacesError(f"{path}: expected {{\"version\": {SNMP_VERSION}, \"exporters\": {{...}}}}")
    out = {}
    for addr, e in raw["exporters"].items():
        if not isinstance(e, dict):
            raise InterfacesError(f"{path}: exporter {addr}: expected an object")
        ifs = {}
        for idx, i in (e.get("interfaces") or {}).items():
            try:
                ifs[int(idx)] = (str(i.get("name") or ""), str(i.get("description") or ""),
                                 int(i.get("speed_mbps") or 0))
            except (TypeError, ValueError, AttributeError):
                raise InterfacesError(f"{path}: exporter {addr} interface {idx!r}: expected "
                                      "{\"name\", \"description\", \"speed_mbps\"}") from None
        out[addr] = {"sys_name": str(e.get("sys_name") or ""), "error": str(e.get("error") or ""),
                     "polled": str(e.get("polled") or ""), "interfaces": ifs}
    return out


def read_static(cfg) -> dict:
    """{exporter: {"name": str, "interfaces": {ifindex: {key: value}}}} from [exporters."ADDR"]
    (only what is given; "*" has no names). ConfigError names a bad key."""
    out = {}
    for addr, table in (cfg.data.get("exporters") or {}).items():
        if not isinstance(table, dict) or addr == "*":
            continue
        where = f'[exporters."{addr}"]'
        entry: dict = {"interfaces": {}}
        if "name" in table:
            if not isinstance(table["name"], str):
                raise _config.ConfigError(f"{where} name = {table['name']!r}: expected a string")
            entry["name"] = table["name"]
        ifs = table.get("interfaces", {})
        if not isinstance(ifs, dict):
            raise _config.ConfigError(f"{where} interfaces: expected tables [exporters.\"{addr}\".interfaces.N]")
        for idx, i in ifs.items():
            at = f'[exporters."{addr}".interfaces.{idx}]'
            if not str(idx).isdigit():
                raise _config.ConfigError(f"{at}: the key must be the ifIndex, a whole number")
            if not isinstance(i, dict):
                raise _config.ConfigError(f"{at}: expected a table with {', '.join(IF_KEYS)}")
            unknown = sorted(set(i) - set(IF_KEYS))
            if unknown:
                raise _config.ConfigError(f"{at}: unknown key(s) {', '.join(unknown)} (known: {', '.join(IF_KEYS)})")
            for k, v in i.items():
                ok = (isinstance(v, int) and not isinstance(v, bool) and v >= 0) if k == "speed_mbps" \
                    else isinstance(v, str)
                if not ok:
                    raise _config.ConfigError(f"{at} {k} = {v!r}: expected "
                                              f"{'a whole number of Mbit/s' if k == 'speed_mbps' else 'a string'}")
            entry["interfaces"][int(idx)] = dict(i)
        if "name" in entry or entry["interfaces"]:
            out[addr] = entry
    return out


def directory(snmp: dict, static: dict) -> dict:
    """{exporter: (exporter name, {ifindex: (name, description, speed)})}, static fields
    winning over SNMP's, SNMP's filling what static leaves out."""
    out = {}
    for addr in set(snmp) | set(static):
        s, st = snmp.get(addr, {}), static.get(addr, {})
        ifs = dict(s.get("interfaces", {}))
        for idx, given in st.get("interfaces", {}).items():
            name, descr, speed = ifs.get(idx, UNKNOWN)
            ifs[idx] = (given.get("name", name), given.get("description", descr), given.get("speed_mbps", speed))
        out[addr] = (st.get("name") or s.get("sys_name", ""), ifs)
    return out


class RefreshRequests:
    """Empty files refresh/<exporter> asking the poller to poll again; at most one per
    exporter per REFRESH_EVERY_S from this process, and none while one is still waiting."""

    def __init__(self, folder: str):
        self.folder = Path(folder)
        self.last: dict[str, float] = {}

    def ask(self, exporter: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        if now - self.last.get(exporter, -1e18) < REFRESH_EVERY_S:
            return False
        self.last[exporter] = now
        path = self.folder / refresh_name(exporter)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return False
        except OSError:  # a read-only home must not stop flows landing
            return False
        return True
