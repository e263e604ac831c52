"""Reverse DNS for the reports: many PTR lookups at once, asynchronous (dnspython's
asyncio resolver), rate-limited, bounded in wall time per report, cached on disk.

Bounds ([rdns] in flowlake.toml): at most `max_lookups` addresses per report (the caller
gives them busiest first), `rate` lookups started per second, `concurrency` in flight,
`timeout_seconds` per lookup and `budget_seconds` for the whole report: what the budget
does not reach stays unknown and the report completes. Offline (no server answers) every
address is unknown or timed out, never an error, and it costs seconds, not the budget: once
SILENT_AFTER lookups have timed out before the resolver answered any, the rest are not
asked (`resolver_silent` in the counts, and in `flowlake status`).

The cache ($FLOWLAKE_HOME/state/rdns_cache.sqlite) keeps answers (a name, or NXDOMAIN /
no PTR as "unknown") for `cache_ttl_hours`, at most `cache_max_entries` addresses, least
recently used dropped first. Timeouts and server failures are not cached: the next report
asks again. Each run writes its counts to state/rdns_last.json for `flowlake status`.
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

RESOLVED, UNKNOWN, TIMED_OUT, NOT_TRIED = "resolved", "unknown", "timed_out", "not_tried"
CACHE_FILE = "rdns_cache.sqlite"
LAST_RUN_FILE = "rdns_last.json"
# Timeouts without a single answer (a name, NXDOMAIN or a refusal) after which the resolver is
# taken as unreachable: a resolver that answers anything, however slowly, is asked on.
SILENT_AFTER = 32


@dataclass(frozen=True)
class Settings:
    server: str = ""
    port: int = 53
    timeout_seconds: float = 2.0
    rate: float = 200.0
    concurrency: int = 64
    budget_seconds: float = 60.0
    max_lookups: int = 20000
    cache_ttl_hours: float = 24.0
    cache_max_entries: int = 200000

    @classmethod
    def from_config(cls, cfg) -> Settings:
        values = cfg.rdns.as_dict()
        s = cls(**{k: values[k] for k in cls.__dataclass_fields__})
        for key in ("port", "timeout_seconds", "rate", "concurrency", "budget_seconds", "cache_max_entries"):
            if getattr(s, key) <= 0:
                raise ValueError(f"config [rdns] {key} = {getattr(s, key)!r}: must be greater than 0")
        for key in ("max_lookups", "cache_ttl_hours"):
            if getattr(s, key) < 0:
                raise ValueError(f"config [rdns] {key} = {getattr(s, key)!r}: must not be negative")
        if s.server:
            try:
                ipaddress.ip_address(s.server)
            except ValueError:
                raise ValueError(f"config [rdns] server = {s.server!r}: not an IP address") from None
        return s


@dataclass
class Result:
    names: dict[str, str | None]          # address -> PTR name (None: unknown)
    status: dict[str, str]                # address -> resolved / unknown / timed_out / not_tried
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


# ---- the cache ------------------------------------------------------------------------
class Cache:
    """address -> (name or None, when answered, when last used), in one SQLite file."""

    def __init__(self, path: Path, ttl_s: float, max_entries: int):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.ttl_s, self.max_entries = path, ttl_s, max_entries
        self.db = sqlite3.connect(path, timeout=30)
        self.db.execute("CREATE TABLE IF NOT EXISTS ptr (addr TEXT PRIMARY KEY, name TEXT, "
                        "answered REAL NOT NULL, used REAL NOT NULL)")

    def close(self) -> None:
        self.db.close()

    def get(self, addrs: list[str], now: float) -> dict[str, str | None]:
        """Fresh entries among addrs (marked used now)."""
        out: dict[str, str | None] = {}
        for i in range(0, len(addrs), 900):  # SQLite's variable limit
            chunk = addrs[i:i + 900]
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(f"SELECT addr, name FROM ptr WHERE answered >= ? AND addr IN ({marks})",
                                   [now - self.ttl_s, *chunk]).fetchall()
            out.update(rows)
        with self.db:
            self.db.executemany("UPDATE ptr SET used = ? WHERE addr = ?", [(now, a) for a in out])
        return out

    def put(self, answers: dict[str, str | None], now: float) -> None:
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO ptr VALUES (?, ?, ?, ?)",
                                [(a, n, now, now) for a, n in answers.items()])

    def prune(self, now: float) -> int:
        """Drop expired entries, then the least recently used beyond max_entries."""
        with self.db:
            self.db.execute("DELETE FROM ptr WHERE answered < ?", (now - self.ttl_s,))
            self.db.execute("DELETE FROM ptr WHERE addr IN (SELECT addr FROM ptr ORDER BY used DESC, addr "
                            "LIMIT -1 OFFSET ?)", (self.max_entries,))
        return self.size()

    def size(self) -> int:
        return self.db.execute("SELECT count(*) FROM ptr").fetchone()[0]


def cache_path(cfg) -> Path:
    return cfg.path("state", CACHE_FILE)


# ---- lookups --------------------------------------------------------------------------
def resolve(addresses: list[str], settings: Settings, cache_file: Path | None = None,
            now: float | None = None) -> Result:
    """PTR names of `addresses` (busiest first: the budget and max_lookups cut the tail)."""
    t0 = time.monotonic()
    now = time.time() if now is None else now
    addrs = list(dict.fromkeys(a for a in addresses if a))
    cache = Cache(cache_file, settings.cache_ttl_hours * 3600, settings.cache_max_entries) if cache_file else None
    try:
        cached = cache.get(addrs, now) if cache else {}
        names = dict(cached)
        status = {a: RESOLVED if n else UNKNOWN for a, n in cached.items()}
        ask = [a for a in addrs if a not in cached]
        for a in ask[settings.max_lookups:]:
            names[a], status[a] = None, NOT_TRIED
        asked, silent = (asyncio.run(_lookup_all(ask[:settings.max_lookups], settings)) if settings.max_lookups
                         else ({}, False))
        for a, (name, st, _) in asked.items():
            names[a], status[a] = name, st
        if cache:
            # answers are cached, "no such name" too; timeouts and failures are asked again next time
            cache.put({a: n for a, (n, _, keep) in asked.items() if keep}, now)
            size = cache.prune(now)
        else:
            size = 0
    finally:
        if cache:
            cache.close()
    counts = {k: sum(1 for s in status.values() if s == k) for k in (RESOLVED, UNKNOWN, TIMED_OUT, NOT_TRIED)}
    counts.update(addresses=len(addrs), cached=len(cached), asked=len(asked), cache_entries=size,
                  resolver_silent=silent)
    return Result(names, status, counts, time.monotonic() - t0)


async def _lookup_all(addrs: list[str], s: Settings) -> tuple[dict[str, tuple[str | None, str, bool]], bool]:
    """(address -> (name, status, worth caching), whether the resolver was given up as
    unreachable: SILENT_AFTER timeouts before any answer)."""
    import dns.asyncresolver  # noqa: PLC0415  (start-up: dns)
    import dns.exception  # noqa: PLC0415  (start-up: dns)
    import dns.resolver  # noqa: PLC0415  (start-up: dns)

    resolver = dns.asyncresolver.Resolver(configure=not s.server)
    if s.server:
        resolver.nameservers = [s.server]
    resolver.port = s.port
    resolver.timeout = resolver.lifetime = s.timeout_seconds
    resolver.retry_servfail = False
    loop = asyncio.get_running_loop()
    deadline = loop.time() + s.budget_seconds
    gate = asyncio.Semaphore(s.concurrency)
    interval = 1.0 / s.rate
    next_slot = loop.time()
    out: dict[str, tuple[str | None, str, bool]] = {}
    answered, timeouts = 0, 0

    def unreachable() -> bool:
        return answered == 0 and timeouts >= SILENT_AFTER

    async def one(addr: str) -> None:
        nonlocal next_slot, answered, timeouts
        async with gate:
            slot = max(loop.time(), next_slot)  # token bucket: one start per interval
            if slot >= deadline or unreachable():
                out[addr] = (None, NOT_TRIED, False)
                return
            next_slot = slot + interval
            await asyncio.sleep(slot - loop.time())
            left = deadline - loop.time()
            if left <= 0 or unreachable():   # the budget, or a verdict reached while this one waited
                out[addr] = (None, NOT_TRIED, False)
                return
            try:
                answer = await resolver.resolve_address(addr, lifetime=min(s.timeout_seconds, left))
                out[addr] = (str(answer[0].target).rstrip(".").lower(), RESOLVED, True)
                answered += 1
            except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
                out[addr] = (None, UNKNOWN, True)
                answered += 1
            except dns.exception.Timeout:
                out[addr] = (None, TIMED_OUT, False)
                timeouts += 1
            except dns.exception.DNSException:
                # REFUSED, SERVFAIL: an answer all the same; unknown, asked again next time
                out[addr] = (None, UNKNOWN, False)
                answered += 1
            except (OSError, ValueError):
                # unreachable server, not an address: unknown, asked again next time
                out[addr] = (None, UNKNOWN, False)

    await asyncio.gather(*(one(a) for a in addrs))
    return out, unreachable()


# ---- names to domains -----------------------------------------------------------------
_EXTRACT = None


def split_name(name: str | None) -> tuple[str | None, str | None]:
    """(registered domain, top-level domain) of a host name by the Public Suffix List
    snapshot bundled with tldextract (never fetched): www.slac.stanford.edu ->
    (stanford.edu, edu); a.b.example.co.uk -> (example.co.uk, uk). A name under no public
    suffix (router.lan) has no registered domain; its TLD is its last label."""
    global _EXTRACT
    if not name:
        return None, None
    if _EXTRACT is None:
        import tldextract  # noqa: PLC0415  (start-up: tldextract)

        _EXTRACT = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=False)
    parts = _EXTRACT(name.rstrip(".").lower())
    domain = parts.top_domain_under_public_suffix or None
    tld = (parts.suffix or name.rstrip(".").lower()).rsplit(".", 1)[-1] or None
    return domain, tld


# ---- status ---------------------------------------------------------------------------
def record_run(cfg, result: Result, date: str) -> None:
    """The last report's counts, for `flowlake status` (replaced atomically)."""
    path = cfg.path("state", LAST_RUN_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"date": date, "finished_at": time.time(), "seconds": round(result.seconds, 3), **result.counts}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def status(cfg) -> dict:
    """Cache size and bound, and the last report's counts."""
    s = cfg.rdns
    out = {"cache_entries": 0, "cache_max_entries": s.cache_max_entries, "cache_bytes": 0,
           "cache_ttl_hours": s.cache_ttl_hours, "server": s.server or "system", "last_run": None}
    path = cache_path(cfg)
    if path.exists():
        out["cache_bytes"] = path.stat().st_size
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
            try:
                out["cache_entries"] = db.execute("SELECT count(*) FROM ptr").fetchone()[0]
            finally:
                db.close()
        except sqlite3.Error as exc:
            out["cache_error"] = str(exc)
    last = cfg.path("state", LAST_RUN_FILE)
    if last.exists():
        try:
            out["last_run"] = json.loads(last.read_text())
        except ValueError:
            out["last_run"] = None
    return out
