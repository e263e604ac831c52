"""The poll loop (`flowlake snmp serve`, started and supervised by `flowlake up` like the
other services), one-off polls, and the poller's lines in `flowlake status`.

Every exporter is polled on its own schedule: counters every [snmp] poll_interval_seconds,
names/aliases/speeds/states every refresh_interval_seconds, and soon (within a second)
after the enricher asks for a refresh. All due exporters of a round are asked at once
(asyncio), so one dead agent's timeouts never delay the others.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from dataclasses import dataclass

from flowlake.base import config as _config
from flowlake.base.component import ModuleComponent
from flowlake.base.process import Managed, wait_until

from . import deltas, query, settings, store
from .coverage import coverage_status

log = logging.getLogger("flowlake.snmp")


def now_ms() -> int:
    return int(time.time() * 1000)


SEEN_EVERY_S = 10.0  # with poll_seen, how often exporters that started sending flows are looked for
# a refresh request is answered at once, but at most this often per exporter: an enricher
# asking again and again about an ifIndex the agent does not have (or a dead agent) costs
# one walk per REFRESH_MIN_S, not one per request
REFRESH_MIN_S = 5.0
COMPACT_EVERY_S = 3600.0  # how often old days' counter files are looked at for merging


class Poller:
    """agents: whom to poll (default: the configuration's, settings.agents); clock: the
    poll's time in ms (default: now; the demo polls its modelled day on the day's clock)."""

    def __init__(self, cfg, agents: dict | None = None, clock=None, keep_engines: bool = False):
        self.cfg = cfg
        self.clock = clock or now_ms
        # keep_engines: one SNMP engine per exporter for the Poller's life, within one event
        # loop (building one costs ~50 ms of MIB loading: a replay of 289 polls pays it once)
        self.engines: dict | None = {} if keep_engines else None
        self.agents: dict = {}
        self.cache: dict = {}
        self.prev: dict = {}
        self.state: dict = {}
        self.next_counters: dict = {}
        self.next_inventory: dict = {}
        self.last_inventory: dict = {}  # monotonic time of each exporter's last inventory poll
        self.next_seen = 0.0
        self.add_agents(settings.agents(cfg) if agents is None else agents)

    def add_agents(self, agents: dict) -> None:
        """Start polling these exporters, from what the files say about them (a restart
        continues where the poller stopped)."""
        new = {a: v for a, v in agents.items() if a not in self.agents}
        if not new:
            return
        known = store.load_interfaces(self.cfg)
        old = store.read_json(store.poller_file(self.cfg)).get("exporters") or {}
        self.prev.update(store.last_samples(self.cfg, new))
        for a, agent in new.items():
            self.agents[a] = agent
            self.cache[a] = known.get(a, {"sys_name": "", "polled_ms": 0, "error": "", "interfaces": {}})
            self.state[a] = old.get(a, {})
            self.next_counters[a] = self.next_inventory[a] = 0.0

    # ---- one exporter ----------------------------------------------------------------
    async def poll(self, addr: str, inventory: bool, counters: bool) -> None:
        agent = self.agents[addr]
        # an engine per exporter: USM keeps one key set per user name in an engine, and two
        # exporters may use the same user name with different passwords
        if self.engines is None:
            engine = query.new_engine()
        else:
            engine = self.engines.get(addr) or self.engines.setdefault(addr, query.new_engine())
        entry = self.cache[addr]
        session = query.Session(engine, agent, rows=0 if inventory else len(entry["interfaces"]))
        st = self.state.setdefault(addr, {})
        st["agent"] = agent.describe()
        t, t0 = self.clock(), time.monotonic()
        try:
            if inventory:
                inv = await query.inventory(session)
                entry.update(sys_name=inv.sys_name, interfaces=inv.interfaces, polled_ms=self.clock(), error="")
                st["last_inventory"] = store.iso(entry["polled_ms"])
                st["interfaces"] = len(inv.interfaces)
            if counters:
                sample = await query.sample(session)
                cur = {"time_ms": self.clock(), "sys_uptime_cs": sample.sys_uptime_cs, "counters": sample.counters}
                rows = deltas.rows(self.prev.get(addr), cur)
                for r in rows:
                    i = entry["interfaces"].get(r["if_index"], {})
                    r.update(if_name=i.get("name", ""), speed_mbps=int(i.get("speed_mbps", 0)),
                             oper_status=int(i.get("oper_status", 0)))
                store.write_counters(self.cfg, addr, cur["time_ms"], rows)
                self.prev[addr] = cur
                st["last_counters"] = store.iso(cur["time_ms"])
                st["counter_rows"] = st.get("counter_rows", 0) + len(rows)
                st["resets"] = st.get("resets", 0) + (1 if rows and rows[0]["reset"] else 0)
                unknown = sorted(set(sample.counters) - set(entry["interfaces"]))
                if unknown and not inventory:  # a new interface appeared: names soon
                    self.next_inventory[addr] = 0.0
            entry["error"] = ""
            st.update(error="", consecutive_failures=0)
        except Exception as exc:  # noqa: BLE001 - one exporter's trouble never stops the others
            text = str(exc) if isinstance(exc, query.SnmpError) else f"{agent.describe()}: {type(exc).__name__}: {exc}"
            entry["error"] = text
            st.update(error=text, last_error=store.iso(t), consecutive_failures=st.get("consecutive_failures", 0) + 1,
                      failures=st.get("failures", 0) + 1)
            log.warning("snmp %s: %s", addr, text, exc_info=not isinstance(exc, query.SnmpError))
        finally:
            if self.engines is None:
                engine.close_dispatcher()
        st["last_attempt"] = store.iso(t)
        st["last_poll_seconds"] = round(time.monotonic() - t0, 3)  # a slow agent shows here

    # ---- one round -------------------------------------------------------------------
    async def round(self, force_inventory=(), everything: bool = False) -> list[str]:
        """Poll what is due (or everything); return the exporters asked."""
        c = self.cfg.snmp
        mono = time.monotonic()
        if c.poll_seen and mono >= self.next_seen:  # routers that began exporting since
            self.next_seen = mono + SEEN_EVERY_S
            self.add_agents(settings.agents(self.cfg))
        asked = store.refresh_requests(self.cfg, self.agents)
        wanted = set(force_inventory) | {a for a in asked if mono >= self.last_inventory.get(a, -REFRESH_MIN_S) + REFRESH_MIN_S}
        jobs = {}
        for addr in self.agents:
            inv = everything or addr in wanted or mono >= self.next_inventory[addr]
            cnt = everything or mono >= self.next_counters[addr]
            if inv or cnt:
                jobs[addr] = (inv, cnt)
                if inv:
                    self.next_inventory[addr] = mono + float(c.refresh_interval_seconds)
                    self.last_inventory[addr] = mono
                if cnt:
                    self.next_counters[addr] = mono + float(c.poll_interval_seconds)
        if jobs:
            await asyncio.gather(*(self.poll(a, inv, cnt) for a, (inv, cnt) in jobs.items()))
            self.save()
            for addr, (inv, _) in jobs.items():
                if inv and addr in asked:  # names just read: the request is answered
                    store.done_refresh(self.cfg, addr)
        return sorted(jobs)

    def close(self) -> None:
        for engine in (self.engines or {}).values():
            engine.close_dispatcher()
        if self.engines:
            self.engines.clear()

    def save(self) -> None:
        store.write_json(store.interfaces_file(self.cfg), store.interfaces_doc(self.cache))
        store.write_json(store.poller_file(self.cfg), {"updated": store.iso(now_ms()), "exporters": self.state})

    async def serve(self, stop: asyncio.Event) -> None:
        self.save()  # status and `flowlake up` see the service at once
        next_compaction = 0.0
        while not stop.is_set():
            await self.round()
            if time.monotonic() >= next_compaction:  # after midnight, the day before yesterday's files merge
                next_compaction = time.monotonic() + COMPACT_EVERY_S
                for day in store.compact_old_days(self.cfg):
                    log.info("snmp: merged the counter files of %s", day)
            try:
                await asyncio.wait_for(stop.wait(), 1.0)  # refresh requests are looked for every second
            except asyncio.TimeoutError:
                pass


def poll_once(cfg=None, exporters=None) -> dict:
    """Poll every exporter (or the named ones) now: names and counters. Returns poller.json's content."""
    cfg = cfg or _config.get()
    p = Poller(cfg)
    if exporters:
        missing = sorted(set(exporters) - set(p.agents))
        if missing:
            raise _config.ConfigError(f"not polled by SNMP: {', '.join(missing)} (polled: {', '.join(p.agents) or 'none'})")
        p.agents = {a: p.agents[a] for a in exporters}
    p.next_seen = float("inf")  # a one-off poll: the exporters known now

    asyncio.run(p.round(everything=True))
    return {"exporters": {a: p.state[a] for a in p.agents}}


def serve(cfg=None) -> None:
    cfg = cfg or _config.get()
    p = Poller(cfg)
    log.info("snmp poller: %d exporters: %s", len(p.agents), ", ".join(a.describe() for a in p.agents.values()))

    async def go():
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for s in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(s, stop.set)
        await p.serve(stop)
    asyncio.run(go())


# ---- supervision -------------------------------------------------------------------

def managed(cfg) -> Managed:
    return Managed("snmp", cfg.path("run"), cfg.path("log"))


def start(cfg=None, timeout: float = 30.0) -> int | None:
    """Start the poller service (`flowlake up` does when an exporter has SNMP)."""
    cfg = cfg or _config.get()
    if not settings.enabled(cfg):
        return None
    settings.agents(cfg)  # a bad [snmp] / [exporters] setting fails here, naming the key
    proc = managed(cfg)
    if proc.running():
        return proc.pid()
    state = store.poller_file(cfg)
    before = state.stat().st_mtime if state.exists() else 0
    pid = proc.start([sys.executable, "-m", "flowlake.cli", "snmp", "serve"])
    wait_until(lambda: state.exists() and state.stat().st_mtime > before, timeout,
               "the SNMP poller to start", interval=0.25, proc=proc)
    return pid


def stop(cfg=None) -> bool:
    return managed(cfg or _config.get()).stop(timeout=15)


# ---- status ------------------------------------------------------------------------

def status(cfg=None) -> dict:
    """Per exporter: agent, last poll, interfaces, last error; coverage warnings (reports)."""
    cfg = cfg or _config.get()
    out: dict = {"enabled": False, "exporters": {}, "interfaces_file": str(store.interfaces_file(cfg)),
                 "errors": 0, "pending_refresh": [], "unknown_refresh": [], "coverage": {}}
    try:
        agents = settings.agents(cfg)
        out["enabled"] = settings.enabled(cfg)
    except _config.ConfigError as exc:
        out["config_error"] = str(exc)
        agents = {}
    doc = store.read_json(store.interfaces_file(cfg)).get("exporters") or {}
    st = store.read_json(store.poller_file(cfg)).get("exporters") or {}
    for addr in sorted(set(agents) | set(doc)):
        d, s = doc.get(addr, {}), st.get(addr, {})
        error = d.get("error", "") or s.get("error", "")
        out["errors"] += bool(error)
        out["exporters"][addr] = {
            "agent": agents[addr].describe() if addr in agents else "(no longer configured)",
            "sys_name": d.get("sys_name", ""), "polled": d.get("polled", ""),
            "interfaces": len(d.get("interfaces") or {}), "last_counters": s.get("last_counters", ""),
            "last_attempt": s.get("last_attempt", ""), "last_poll_seconds": s.get("last_poll_seconds"), "error": error,
            "failures": s.get("failures", 0), "counter_rows": s.get("counter_rows", 0), "resets": s.get("resets", 0)}
    out["pending_refresh"] = store.refresh_requests(cfg, agents)
    out["unknown_refresh"] = [p.name for p in store.unknown_requests(cfg, agents)]

    out["coverage"] = coverage_status(cfg)
    return out


def print_status(console, st: dict) -> None:
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    if not st["exporters"] and not st.get("config_error"):
        return
    t = Table(title=f"SNMP poller ({len(st['exporters'])} exporters, {st['errors']} with errors)")
    for col in ("exporter", "sysName", "interfaces", "last poll", "last counters", "error"):
        t.add_column(col)
    for addr, e in st["exporters"].items():
        err = f"[bold red]{e['error']}[/]" if e["error"] else "[green]ok[/]"
        t.add_row(addr, e["sys_name"] or "-", str(e["interfaces"]), e["polled"] or "never",
                  e["last_counters"] or "never", err)
    console.print(t)
    if st.get("config_error"):
        console.print(f"[bold red]SNMP configuration: {st['config_error']}[/]")
    if st["unknown_refresh"]:
        console.print(f"SNMP refresh requested for exporters not polled: {', '.join(st['unknown_refresh'])} "
                      "(add [exporters.\"ADDR\"] snmp = true, or [snmp] poll_seen = true)")
    cov = st.get("coverage") or {}
    for w in cov.get("warnings", []):
        console.print(f"[bold red]WARNING: {w}[/]")


@dataclass(frozen=True)
class PollerSettings:
    """[snmp] defaults of the poller (per exporter: [exporters."ADDR"] snmp)."""
    poll_seen: bool
    version: str
    port: int


class SnmpPoller(ModuleComponent):
    """Interface names and counters of every exporter with SNMP ([exporters."ADDR"] snmp)."""
    name = "snmp"
    settings_type = PollerSettings
    section = "snmp"
    functions = sys.modules[__name__]

    def enabled(self) -> bool:
        return settings.enabled(self.cfg)
