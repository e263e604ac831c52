"""The demo's SNMP: a real net-snmp agent per modelled router, polled by flowlake's own poller
through the modelled day, so the Capacity dashboard's SNMP panels (utilisation, peak, 95th
percentile, flow coverage) have counters that move with the modelled traffic.

- Counters: the day's flows in the lake (what the routers exported), each flow's bytes and
  packets spread evenly over its [time_start, time_end] in the poll steps, in on its
  input_if and out on its output_if, plus 18 bytes of Ethernet header and FCS per packet
  (IF-MIB's octets include framing; the flows' bytes are layer 3): a router's counters see
  every byte its flows do, so flow coverage is just below 1.
- Agents: Debian's snmpd, one per router on its exporter address (127.0.0.2-4, one port), its
  own config (`-C`), the IF-MIB's ifTable and ifXTable served by flowlake/demo_ifmib.py
  (net-snmp pass_persist) from a state file: names, aliases and speeds of the demo site's
  interfaces, the counters at the current step.
- Clock: the demo's day is in the past, so the demo is the clock: at every step it writes
  the counters of that moment, then the poller (collectors/snmp/service.Poller, its SNMP
  requests, deltas and counter files) reads all agents at once, stamped with the step's
  time. 97 polls of each router (00:00 to 24:00, every 15 minutes); then the agents stop.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from flowlake import demo_site
from flowlake.base.ports import free_port
from flowlake.base.process import stop_child

log = logging.getLogger(__name__)

# the poll interval on the demo's clock (and the steps each flow is spread over): 15 minutes,
# 97 polls of each router for the day; each poll costs the poller ~0.1-0.2 s of CPU (mostly a
# pysnmp engine's set-up), so 5-minute polls (289 a router) would add a minute to the demo
STEP_MS = 900_000
FRAMING_BYTES = 18         # Ethernet header (14) + FCS (4) per packet: counted by ifHCInOctets, not by NetFlow
IFMIB = Path(__file__).with_name("demo_ifmib.py")
SUBTREES = (".1.3.6.1.2.1.2.2", ".1.3.6.1.2.1.31.1.1")  # ifTable, ifXTable: served by demo_ifmib.py


def snmpd_path() -> str | None:
    return shutil.which("snmpd") or ("/usr/sbin/snmpd" if Path("/usr/sbin/snmpd").exists() else None)


def interfaces() -> dict[str, dict[int, dict]]:
    """exporter -> ifIndex -> name, alias, speed: the demo site's interfaces (demo_site)."""
    out: dict[str, dict[int, dict]] = {}
    for addr, (_name, uplink) in demo_site.ROUTERS.items():
        rows = [(demo_site.UPLINK_IF, uplink, demo_site.UPLINK_MBPS),
                *((i, d, demo_site.LAN_MBPS) for i, d in demo_site.LAN.items())]
        out[addr] = {idx: {"name": f"et-0/0/{idx}" if idx == demo_site.UPLINK_IF else f"xe-1/0/{idx}",
                           "alias": descr, "speed_mbps": mbps, "oper_status": 1} for idx, descr, mbps in rows}
    return out


def step_totals(con, files: list[str], day: dt.date) -> dict[tuple[str, int], dict[int, dict[str, float]]]:
    """(exporter, ifIndex) -> step start (ms) -> in/out octets and packets within that step,
    from the flows in `files` (a flow's bytes spread evenly over its duration)."""
    from flowlake.pipelines import duck  # noqa: PLC0415  (start-up: only the demo reads the day this way)

    lo = demo_day_ms(day)
    sql = f"""
        WITH f AS (
            SELECT exporter, CAST(input_if AS BIGINT) AS i_in, CAST(output_if AS BIGINT) AS i_out,
                   epoch_ms(time_start) AS t0, greatest(epoch_ms(time_end), epoch_ms(time_start) + 1) AS t1,
                   CAST(bytes AS DOUBLE) AS bytes, CAST(packets AS DOUBLE) AS packets
            FROM read_parquet({duck.sql_list(files)}, union_by_name = true)),
        sides AS (SELECT exporter, i_in AS if_index, 'in' AS side, t0, t1, bytes, packets FROM f
                  UNION ALL SELECT exporter, i_out, 'out', t0, t1, bytes, packets FROM f),
        spread AS (SELECT *, unnest(range(t0 // {STEP_MS} * {STEP_MS}, t1, {STEP_MS})) AS b FROM sides),
        shares AS (SELECT *, (least(t1, b + {STEP_MS}) - greatest(t0, b)) / (t1 - t0) AS w FROM spread)
        SELECT exporter, if_index, side, b, sum(bytes * w) AS bytes, sum(packets * w) AS packets
        FROM shares WHERE b >= {lo} AND b < {lo + 86_400_000} GROUP BY ALL"""
    out: dict[tuple[str, int], dict[int, dict[str, float]]] = {}
    for exporter, idx, side, b, octets, packets in con.execute(sql).fetchall():
        cell = out.setdefault((exporter, int(idx)), {}).setdefault(int(b), {})
        cell[f"{side}_octets"] = cell.get(f"{side}_octets", 0.0) + octets + FRAMING_BYTES * packets
        cell[f"{side}_ucast_pkts"] = cell.get(f"{side}_ucast_pkts", 0.0) + packets
    return out


def demo_day_ms(day: dt.date) -> int:
    return int(dt.datetime.combine(day, dt.time(), dt.UTC).timestamp() * 1000)


def base_counters(exporter: str, idx: int) -> dict[str, int]:
    """Where a counter stands at the day's first poll: the router has been up for a while."""
    seed = sum(map(ord, exporter)) * 100 + idx
    return {"in_octets": seed * 10**9, "out_octets": seed * 7 * 10**8, "in_ucast_pkts": seed * 10**6,
            "out_ucast_pkts": seed * 7 * 10**5, "in_errors": 0, "out_errors": 0, "in_discards": 0, "out_discards": 0}


class Agent:
    """One snmpd for one router: config, state file, process."""

    def __init__(self, workdir: Path, exporter: str, port: int, ifaces: dict[int, dict]):
        self.dir, self.exporter, self.port, self.ifaces = workdir, exporter, port, ifaces
        self.state = workdir / "ifmib.json"
        self.proc: subprocess.Popen | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    def write_state(self, counters: dict[int, dict[str, int]]) -> None:
        doc = {"interfaces": {str(i): {**v, "counters": counters[i]} for i, v in self.ifaces.items()}}
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(self.state)  # the pass_persist program sees the old or the new file whole

    def start(self, community: str, timeout: float = 15.0) -> None:
        name = demo_site.ROUTERS[self.exporter][0]
        prog = f"{sys.executable} {IFMIB} {self.state}"
        conf = [f"rocommunity {community} 127.0.0.0/8", f"sysName {name}", "sysLocation flowlake demo site",
                "sysContact nobody", "dontLogTCPWrappersConnects yes",
                *(f"pass_persist {oid} {prog}" for oid in SUBTREES)]
        (self.dir / "snmpd.conf").write_text("\n".join(conf) + "\n")
        (self.dir / "persistent").mkdir(exist_ok=True)
        env = {**os.environ, "SNMP_PERSISTENT_DIR": str(self.dir / "persistent"), "MIBS": "", "MIBDIRS": "/nonexistent"}
        # -I: not the host's own interfaces (the pass_persist program serves those tables),
        # no SMUX port (tcp 199: the second agent's would clash)
        cmd = [snmpd_path(), "-f", "-C", "-c", str(self.dir / "snmpd.conf"), "-Lf", str(self.dir / "snmpd.log"),
               "-I", "-ifTable,ifXTable,smux", f"udp:{self.exporter}:{self.port}"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"snmpd for {self.exporter} exited ({self.proc.returncode}): "
                                   f"{self.proc.stderr.read().decode()[-600:]}")
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # bound: the agent is up
                try:
                    s.bind((self.exporter, self.port))
                except OSError:
                    return
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"snmpd for {self.exporter} did not bind udp:{self.exporter}:{self.port} in {timeout:.0f} s")

    def stop(self) -> None:
        stop_child(self.proc)


def clear_day(cfg, day: dt.date, exporters) -> int:
    """Remove counter files of these exporters for the day (and the next day's first poll):
    a second demo of the same day polls again from its start."""
    from flowlake.collectors.snmp import store  # noqa: PLC0415  (start-up: pyarrow)

    gone = 0
    for d in (day, day + dt.timedelta(days=1)):
        folder = store.counters_dir(cfg) / f"date={d.isoformat()}"
        for e in exporters:
            for f in folder.glob(f"{store.safe_name(e)}-*.parquet"):
                f.unlink()
                gone += 1
    return gone


def applies(cfg) -> bool:
    """The demo site's settings are in use (its routers and interfaces are the ones modelled)."""
    return cfg.source is not None and cfg.source.parent == demo_site.site_dir(cfg)


def run_day(cfg, day: dt.date, progress=None) -> dict:
    """Poll the demo's agents through `day` (see the module's doc). Returns what was done;
    {"skipped": reason} without snmpd or flows."""
    from flowlake.collectors.snmp import settings, store  # noqa: PLC0415  (start-up: pysnmp)
    from flowlake.collectors.snmp.service import Poller  # noqa: PLC0415  (start-up: pysnmp)
    from flowlake.pipelines import duck  # noqa: PLC0415  (start-up: duckdb)
    from flowlake.pipelines.lake_read import lake_files  # noqa: PLC0415  (start-up: deltalake)

    if snmpd_path() is None:
        return {"skipped": "snmpd is not installed (Debian package snmpd; `make setup` installs it)"}
    _, files = lake_files(cfg, "flows", [cfg.lake / "flows" / f"date={day.isoformat()}"])
    if not files:
        return {"skipped": f"no flows of {day} in the lake"}
    t_start = time.monotonic()
    ifaces = interfaces()
    totals = step_totals(duck.connect(cfg), files, day)
    community = str(cfg.snmp.community)
    port = free_port(socket.SOCK_DGRAM)
    agents = {e: Agent(cfg.path("demo", "snmp", e), e, port, v) for e, v in ifaces.items()}
    clear_day(cfg, day, agents)
    lo = demo_day_ms(day)
    steps = 86_400_000 // STEP_MS
    current = {e: {i: base_counters(e, i) for i in v} for e, v in ifaces.items()}
    for e, a in agents.items():
        a.write_state({i: {k: int(x) for k, x in c.items()} for i, c in current[e].items()})
    poller = Poller(cfg)
    poller.agents = {}
    poller.add_agents({e: settings.Agent(exporter=e, address=e, port=port, version="2c", community=community,
                                         timeout_seconds=5.0, retries=2) for e in agents})
    poller.prev = {}  # the day starts from its first poll, whatever the files held before
    rows = errors = 0
    try:
        for a in agents.values():
            a.start(community)

        async def poll_all(k: int) -> None:
            poller.clock = lambda: lo + k * STEP_MS
            await asyncio.gather(*(poller.poll(e, k == 0, True) for e in agents))

        async def day_loop() -> None:
            nonlocal rows, errors
            for k in range(steps + 1):  # 00:00, 00:05, ..., 24:00 (the next day's first poll closes the day)
                if k:
                    b = lo + (k - 1) * STEP_MS  # the step that just ended
                    for e, a in agents.items():
                        for i, c in current[e].items():
                            for name, v in totals.get((e, i), {}).get(b, {}).items():
                                c[name] += v
                        a.write_state({i: {n: int(x) for n, x in c.items()} for i, c in current[e].items()})
                await poll_all(k)
                for e in agents:
                    st = poller.state.get(e, {})
                    if st.get("error"):
                        errors += 1
                        log.warning("demo snmp %s at step %d: %s", e, k, st["error"])
                if progress:
                    progress(k + 1, steps + 1)
        asyncio.run(day_loop())
    finally:
        for a in agents.values():
            a.stop()
    folder = store.counters_dir(cfg) / f"date={day.isoformat()}"
    for e in agents:
        rows += sum(1 for _ in folder.glob(f"{store.safe_name(e)}-*.parquet"))
    return {"agents": len(agents), "polls": (steps + 1) * len(agents), "poll_files": rows, "errors": errors,
            "seconds": round(time.monotonic() - t_start, 1)}
