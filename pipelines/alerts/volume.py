"""Volumetric thresholds: an interface's load above [alerts] interface_share of its speed
(in and out separately), and an exporter's total above [alerts] exporter_max_bps / _pps.

Interface speeds, first found wins: the SNMP poller's table
($FLOWLAKE_HOME/state/snmp/interfaces.json, re-read when it changes), then
[exporters."ADDR".interfaces.N] speed_mbps, then [active] interface_speeds
("exporter/ifindex=bps", "*" wildcards). An interface of unknown speed is not judged.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from flowlake.collectors.snmp.store import interfaces_file  # the SNMP poller's table
from flowlake.pipelines.interface_speeds import parse_speeds, speed_of

from .base import Detector, Finding, Interval, severity, si


class InterfaceSpeeds:
    def __init__(self, snmp_file: Path | None, exporters: dict, active_speeds=()):
        self.snmp_file, self._mtime, self._snmp = snmp_file, None, {}
        self.static = {}
        for addr, conf in (exporters or {}).items():
            for idx, ifc in ((conf or {}).get("interfaces") or {}).items() if isinstance(conf, dict) else ():
                if isinstance(ifc, dict) and ifc.get("speed_mbps"):
                    self.static[(addr, str(idx))] = (float(ifc["speed_mbps"]) * 1e6, ifc.get("name"))
        self.active = parse_speeds(active_speeds)

    @classmethod
    def from_config(cls, cfg) -> "InterfaceSpeeds":
        return cls(interfaces_file(cfg), cfg.data.get("exporters") or {}, cfg.active.interface_speeds)

    def _reload(self) -> None:
        try:
            mtime = self.snmp_file.stat().st_mtime if self.snmp_file else None
        except OSError:
            mtime = None
        if mtime == self._mtime:
            return
        self._mtime, self._snmp = mtime, {}
        if mtime is None:
            return
        try:
            doc = json.loads(self.snmp_file.read_text())
            for addr, ex in (doc.get("exporters") or {}).items():
                for idx, ifc in (ex.get("interfaces") or {}).items():
                    if ifc.get("speed_mbps"):
                        self._snmp[(addr, str(idx))] = (float(ifc["speed_mbps"]) * 1e6, ifc.get("name"))
        except (OSError, ValueError, AttributeError, TypeError):
            self._snmp = {}  # half-written or foreign: the next change is read again

    def lookup(self, exporter: str, if_index: int) -> tuple[float, str | None] | None:
        """(bit/s, name) or None when unknown."""
        self._reload()
        key = (exporter, str(if_index))
        if key in self._snmp:
            return self._snmp[key]
        if key in self.static:
            return self.static[key]
        bps = speed_of(self.active, None, exporter, if_index)  # the jobs' and dashboards' reading of it
        return None if bps is None else (bps, None)


class InterfaceVolumeDetector(Detector):
    name = "interface_volume"

    def __init__(self, speeds: InterfaceSpeeds, share: float, critical_factor: float = 4.0):
        self.speeds, self.share, self.critical_factor = speeds, share, critical_factor

    @classmethod
    def from_config(cls, cfg) -> "InterfaceVolumeDetector":
        return cls(InterfaceSpeeds.from_config(cfg), float(cfg.alerts.interface_share), float(cfg.alerts.critical_factor))

    def evaluate(self, iv: Interval) -> list[Finding]:
        f, out = iv.flows, []
        if f.num_rows == 0 or self.share <= 0:
            return out
        scaled = pa.table({"exporter": f["exporter"], "input_if": f["input_if"], "output_if": f["output_if"],
                           "bytes": iv.in_interval("bytes"), "packets": iv.in_interval("packets")})
        for side, col in (("in", "input_if"), ("out", "output_if")):
            per = scaled.group_by(["exporter", col]).aggregate([("bytes", "sum"), ("packets", "sum")])
            for exporter, idx, nbytes, npk in zip(*(per[c].to_pylist() for c in ("exporter", col, "bytes_sum", "packets_sum"))):
                known = self.speeds.lookup(exporter, idx)
                if known is None:
                    continue
                speed, name = known
                bps = nbytes * 8 / iv.seconds
                limit = self.share * speed
                if bps < limit:
                    continue
                label = f"{exporter} if{idx}" + (f" ({name})" if name else "")
                # a link cannot carry more than its speed: critical is reaching it, not critical_factor times it
                sev = "critical" if bps >= speed else "warning"
                out.append(Finding(self.name, f"{exporter}/{idx}/{side}",
                                   f"{label} {side}: {si(bps, 'bit/s')} = {bps / speed:.0%} of {si(speed, 'bit/s')} "
                                   f"(threshold {self.share:.0%})", bps, limit,
                                   {"bps": bps, "pps": npk / iv.seconds, "speed_bps": speed, "utilisation": bps / speed,
                                    "interface_name": name}, sev))
        return out


class ExporterVolumeDetector(Detector):
    name = "exporter_volume"

    def __init__(self, max_bps: float, max_pps: float, critical_factor: float = 4.0):
        self.max_bps, self.max_pps, self.critical_factor = max_bps, max_pps, critical_factor

    @classmethod
    def from_config(cls, cfg) -> "ExporterVolumeDetector":
        a = cfg.alerts
        return cls(float(a.exporter_max_bps), float(a.exporter_max_pps), float(a.critical_factor))

    def evaluate(self, iv: Interval) -> list[Finding]:
        f, out = iv.flows, []
        if f.num_rows == 0 or (self.max_bps <= 0 and self.max_pps <= 0):
            return out
        scaled = pa.table({"exporter": f["exporter"], "bytes": iv.in_interval("bytes"),
                           "packets": iv.in_interval("packets")})
        per = scaled.group_by("exporter").aggregate([("bytes", "sum"), ("packets", "sum")])
        for exporter, nbytes, npk in zip(*(per[c].to_pylist() for c in ("exporter", "bytes_sum", "packets_sum"))):
            bps, pps = nbytes * 8 / iv.seconds, npk / iv.seconds
            over = [(v / lim, v, lim, unit) for v, lim, unit in ((bps, self.max_bps, "bit/s"), (pps, self.max_pps, "pkt/s"))
                    if lim > 0 and v >= lim]
            if not over:
                continue
            ratio, v, lim, unit = max(over)
            out.append(Finding(self.name, exporter, f"exporter {exporter}: {si(bps, 'bit/s')}, {si(pps, 'pkt/s')} "
                               f"(threshold {si(lim, unit)})", v, lim, {"bps": bps, "pps": pps},
                               severity(v, lim, self.critical_factor)))
        return out
