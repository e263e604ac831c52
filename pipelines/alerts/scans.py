"""Port scans (vertical) and host sweeps (horizontal), with the daily `scanners` job's rule
(jobs/security_rules.ScanRule, [security] scan_*) over a sliding window of
[alerts] scan_window_seconds: a scan spread over several intervals still adds up.

Only sources that probed in the current interval are judged (a scan that stopped leaves
its alert to resolve); the window keeps the interval's probes (src, dst, port) and each
source's flow and probe counts, so memory is bounded by the window's flows. DuckDB sees only
the probes of sources whose counts can pass the rule.
"""
from __future__ import annotations

from collections import deque

import pyarrow as pa
import pyarrow.compute as pc

from flowlake.pipelines.security_rules import ScanRule

from .base import Detector, Finding, Interval, severity

SQL = """
WITH p AS (SELECT * FROM probes WHERE src_addr IN (SELECT src_addr FROM current)),
per_dst AS (SELECT src_addr, dst_addr, count(DISTINCT dst_port) AS ports FROM p GROUP BY ALL),
v AS (SELECT src_addr, max(ports) AS max_ports, arg_max(dst_addr, ports) AS port_target FROM per_dst GROUP BY ALL),
a AS (SELECT src_addr, count(*) AS probe_flows, count(DISTINCT dst_addr) AS destinations,
             count(DISTINCT dst_port) AS distinct_ports, mode(dst_port) AS top_port,
             list(DISTINCT dst_addr ORDER BY dst_addr)[1:$n] AS sample_targets,
             list(DISTINCT dst_port ORDER BY dst_port)[1:$n] AS sample_ports
      FROM p GROUP BY ALL),
f AS (SELECT src_addr, sum(flows) AS flows FROM counts WHERE src_addr IN (SELECT src_addr FROM a) GROUP BY ALL)
SELECT a.*, v.max_ports, v.port_target, f.flows, a.probe_flows / f.flows AS small_share
FROM a JOIN v USING (src_addr) JOIN f USING (src_addr)
WHERE (a.destinations >= $d OR v.max_ports >= $p) AND a.probe_flows / f.flows >= $s
"""


class ScanDetector(Detector):
    name = "scan"

    def __init__(self, rule: ScanRule, window_seconds: float, critical_factor: float = 4.0, sample: int = 10):
        import duckdb  # noqa: PLC0415  (start-up: duckdb)

        self.rule, self.window_ms = rule, int(window_seconds * 1000)
        self.critical_factor, self.sample = critical_factor, sample
        self.window: deque = deque()  # (end_ms, probes, flows per source, probes per source)
        self.con = duckdb.connect()

    @classmethod
    def from_config(cls, cfg) -> "ScanDetector":
        a = cfg.alerts
        return cls(ScanRule.from_config(cfg), float(a.scan_window_seconds), float(a.critical_factor),
                   int(cfg.security.sample_size))

    def evaluate(self, iv: Interval) -> list[Finding]:
        f = iv.flows
        wire_limit = pc.multiply(pc.max_element_wise(pc.cast(f["sampling_rate"], pa.int64()), 1), self.rule.small_packets)
        probes = f.filter(pc.less_equal(f["packets"], wire_limit)).select(
            ["src_addr", "dst_addr", "dst_port"])
        per = f.group_by("src_addr").aggregate([("src_addr", "count")])
        counts = pa.table({"src_addr": per["src_addr"], "flows": per["src_addr_count"]})
        per = probes.group_by("src_addr").aggregate([("src_addr", "count")])
        probed = pa.table({"src_addr": per["src_addr"], "probes": per["src_addr_count"]})
        self.window.append((iv.end_ms, probes, counts, probed))
        while self.window and self.window[0][0] <= iv.end_ms - self.window_ms:
            self.window.popleft()
        if probes.num_rows == 0:
            return []
        # Only sources that can pass the SQL's conditions on counts alone go to DuckDB: enough
        # probes in the window to reach either threshold, and probes at least min_small_share of
        # their flows (the SQL checks both again, exactly; a source's figures do not depend on
        # the others', so the findings are the same as with every source).
        r = self.rule
        n = pa.concat_tables([w[3] for w in self.window]).group_by("src_addr").aggregate([("probes", "sum")])
        n = n.filter(pc.greater_equal(n["probes_sum"], min(r.min_destinations, r.min_ports)))
        current = pc.unique(probes["src_addr"])
        current = current.filter(pc.is_in(current, value_set=n["src_addr"]))
        if len(current) == 0:
            return []
        n = n.filter(pc.is_in(n["src_addr"], value_set=current))
        counts = pa.concat_tables([w[2] for w in self.window])
        counts = counts.filter(pc.is_in(counts["src_addr"], value_set=current))
        flows = counts.group_by("src_addr").aggregate([("flows", "sum")])
        j = n.join(flows, "src_addr")
        share = pc.divide(pc.cast(j["probes_sum"], pa.float64()), pc.cast(j["flows_sum"], pa.float64()))
        current = j.filter(pc.greater_equal(share, r.min_small_share * (1 - 1e-9)))["src_addr"]
        if len(current) == 0:
            return []
        window = pa.concat_tables([w[1] for w in self.window])
        con = self.con
        con.register("current", pa.table({"src_addr": current}))
        con.register("probes", window.filter(pc.is_in(window["src_addr"], value_set=current)))
        con.register("counts", counts.filter(pc.is_in(counts["src_addr"], value_set=current)))
        rows = con.execute(SQL, {"n": self.sample, "d": r.min_destinations, "p": r.min_ports,
                                 "s": r.min_small_share}).fetch_arrow_table().to_pylist()
        for view in ("current", "probes", "counts"):  # the window's tables are not kept past the query
            con.unregister(view)
        out = []
        for row in rows:
            kind = r.kind(row["destinations"], row["max_ports"], row["small_share"])
            # the measure: how far past its threshold the stronger of the two counts is
            ratio = max(row["destinations"] / r.min_destinations, row["max_ports"] / r.min_ports)
            what = {"horizontal": f"swept {row['destinations']} hosts",
                    "vertical": f"probed {row['max_ports']} ports of {row['port_target']}",
                    "both": f"swept {row['destinations']} hosts and probed {row['max_ports']} ports of "
                            f"{row['port_target']}"}[kind]
            summary = (f"{kind} scan from {row['src_addr']}: {what} in {self.window_ms / 1000:g} s "
                       f"({row['probe_flows']} probes, {row['small_share']:.0%} of its flows; top port {row['top_port']})")
            details = {"kind": kind, "probe_flows": row["probe_flows"], "flows": row["flows"],
                       "destinations": row["destinations"], "distinct_ports": row["distinct_ports"],
                       "max_ports_per_destination": row["max_ports"], "top_port": row["top_port"],
                       "sample_targets": row["sample_targets"], "sample_ports": row["sample_ports"]}
            out.append(Finding(self.name, row["src_addr"], summary, ratio, 1.0, details,
                               severity(ratio, 1.0, self.critical_factor)))
        return out
