"""The demo's SNMP: a real net-snmp agent per modelled router, polled by flowlake's own poller.

Each agent (Debian's snmpd, its interface modules off) serves the router's interfaces as the
demo site names them (demo_site.interfaces: names, aliases, speeds) through
collectors/traffic/ifmib_agent.py, with the counters the router would have counted while
forwarding the modelled day (collectors/traffic/if_counters: every packet, framing
included; what the traffic model wrote beside the day, `interfaces.json`).

The day is modelled in minutes, so its polls are replayed on the day's clock: before each
poll time (every 5 minutes of the day) the agents' state files get the counters of that
moment, then the poller asks every agent at once (GETBULK over UDP, as it asks a router) and
writes lake/interface_counters as it always does. The Capacity dashboard's utilisation and
flow coverage (job interface_capacity) then have the day. The agents stop after the
replay; the stack's own poller stays off (no [exporters] snmp key): once the demo ends there
is no router to poll.
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from . import demo_site
from .base.ports import free_port
from .collectors.snmp import service, settings, store
from .collectors.snmp.snmpd import Snmpd
from .collectors.traffic import ifmib_agent

COMMUNITY = "flowlake-demo"
SUBTREES = (".1.3.6.1.2.1.2.2", ".1.3.6.1.2.1.31.1.1")  # ifTable, ifXTable
MODULES_OFF = ("interfaces", "ifTable", "ifXTable")      # snmpd's own: the host's interfaces


def state(addr: str, counters: dict, k: int) -> dict:
    """The agent's state file at poll k: the site's names, the model's counters."""
    out = {}
    for idx, (name, alias, mbps) in demo_site.interfaces(addr).items():
        c = counters.get(str(idx)) or counters.get(idx) or {}
        out[str(idx)] = {"name": name, "alias": alias, "speed_mbps": mbps, "oper_status": 1,
                         "counters": {key: values[k] for key, values in c.items()}}
    return {"interfaces": out}


def _write(path: Path, doc: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def forget_day(cfg, exporters, lo_ms: int, hi_ms: int) -> int:
    """Remove these exporters' counter files from lo_ms to hi_ms (a demo run again for its day)."""
    gone = 0
    root = store.counters_dir(cfg)
    names = {store.safe_name(a) for a in exporters}
    for f in root.glob("date=*/*.parquet") if root.is_dir() else []:
        m = store.FILE_NAME.match(f.name)
        if m and m["exporter"] in names and lo_ms <= int(m["ms"]) <= hi_ms:
            f.unlink()
            gone += 1
    return gone


def agent(addr: str, port: int) -> settings.Agent:
    return settings.Agent(exporter=addr, address=addr, port=port, version="2c", community=COMMUNITY,
                          timeout_seconds=2.0, retries=2)


def replay(cfg, counters_file: Path, progress=None) -> dict:
    """Serve the modelled routers' counters from real agents and poll them at every poll time
    of the day. Returns {"agents", "polls", "rows", "errors", "seconds"}."""
    t_start = time.monotonic()
    doc = json.loads(Path(counters_file).read_text())
    times = doc["times_ms"]
    routers = {a: r for a, r in doc["routers"].items() if a in demo_site.ROUTERS}
    workdir = cfg.path("demo", "snmp")
    port = free_port(socket.SOCK_DGRAM)
    forget_day(cfg, routers, times[0], times[-1])
    with ExitStack() as stack:
        agents, started = {}, []
        for addr, r in routers.items():
            folder = workdir / demo_site.ROUTERS[addr][0]
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / "ifmib.json"
            _write(path, state(addr, r["interfaces"], 0))
            extra = [f"pass_persist {tree} {sys.executable} {ifmib_agent.__file__} {path} {tree}" for tree in SUBTREES]
            snmpd = Snmpd(workdir=folder, address=addr, port=port, community=COMMUNITY,
                          sys_name=demo_site.ROUTERS[addr][0], location="flowlake demo site",
                          extra=extra, modules_off=list(MODULES_OFF)).launch()
            stack.callback(snmpd.stop)
            started.append(snmpd)
            agents[addr] = agent(addr, port)
        for snmpd in started:
            snmpd.wait_ready()
        clock = {"ms": times[0]}
        poller = service.Poller(cfg, agents=agents, clock=lambda: clock["ms"], keep_engines=True)
        poller.prev = {}  # the day's first poll is its counters' baseline, whatever an earlier run left
        before = {a: poller.state.get(a, {}).get("counter_rows", 0) for a in agents}
        failed = {a: poller.state.get(a, {}).get("failures", 0) for a in agents}

        async def run() -> None:
            for k, t in enumerate(times):
                for addr, r in routers.items():
                    _write(workdir / demo_site.ROUTERS[addr][0] / "ifmib.json", state(addr, r["interfaces"], k))
                clock["ms"] = t
                await asyncio.gather(*(poller.poll(a, inventory=k == 0, counters=True) for a in agents))
                if progress:
                    progress(k + 1, len(times))

            poller.close()

        asyncio.run(run())
        poller.save()
    st = poller.state
    return {"agents": len(agents), "polls": len(times),
            "rows": sum(st[a].get("counter_rows", 0) - before[a] for a in agents),
            "errors": sum(st[a].get("failures", 0) - failed[a] for a in agents),
            "last_error": next((st[a]["error"] for a in agents if st[a].get("error")), ""),
            "seconds": round(time.monotonic() - t_start, 1)}
