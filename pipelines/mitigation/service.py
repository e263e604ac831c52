"""The mitigation loop (`flowlake mitigation serve`, the `mitigation` component): every
second, the routes wanted (policy.py, from state/ddos/attacks.json, the safety rules and
the operator's overrides) against the speaker's RIB; what differs is announced or
withdrawn, every change recorded in lake/mitigations/ with its reason, and the outcome per
attack written to state/ddos/mitigations.json (the detector shows it).

Modes ([ddos] mitigation): dry-run keeps its routes in its ledger only (nothing is sent)
and records `dry-run-announce`/`dry-run-withdraw`; rtbh and flowspec drive gobgpd (the
`bgp-speaker` component, collectors/bgp/speaker.py). A route is `announce`d once it is in
the speaker's RIB and the session with the router is established; until then it is
`failed` with the reason (session state and the last NOTIFICATION, or the speaker not
answering), retried every tick: gobgpd sends its RIB when the session comes up.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass

from flowlake.base.component import ModuleComponent
from flowlake.base.process import Managed, python_argv, wait_until
from flowlake.collectors.bgp import speaker

from . import policy, store

log = logging.getLogger(__name__)
TICK_S = 1.0
FAMILIES = {"ipv4", "ipv6", "ipv4-flowspec", "ipv6-flowspec"}


@dataclass(frozen=True)
class MitigationSettings:
    """The [ddos] keys of the mitigation's policy (the speaker's: collectors/bgp/speaker.py)."""
    enabled: bool
    mitigation: str
    blackhole_community: str
    blackhole_next_hop: str
    blackhole_next_hop_v6: str
    flowspec_rate_bytes: float
    allow_list: list
    max_announcements: int
    min_duration_seconds: float
    hold_down_minutes: float
    stale_after_seconds: float


def wanted(cfg) -> bool:
    return bool(cfg.ddos.enabled) and cfg.ddos.mitigation != "off"


class Loop:
    """One reconciliation per `tick()`; state in ledger.json survives a restart."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.rules = policy.rules_from_config(cfg)
        self.bgp = self.rules.mode in ("rtbh", "flowspec")
        if self.bgp:
            self.speaker = speaker.check(cfg)
            self.client = speaker.Client(self.speaker.api_port, timeout=5.0)
        self.neighbor = cfg.ddos.neighbor if self.bgp else ""
        self.ledger = store.read_ledger(cfg)
        self.events = store.EventStore.from_config(cfg)
        self.lake_error = ""
        self.stale = ""  # the stale attacks.json note ('' while the detector writes it)
        self.counts = {"announce": 0, "withdraw": 0, "failed": 0, "refused": 0}
        # the lake is written beside the loop: a slow commit never delays an announcement
        self._lock = threading.Lock()
        self._writer: threading.Thread | None = None

    # ---- one round ------------------------------------------------------------------
    def tick(self, now: float | None = None) -> dict:
        now = time.time() if now is None else now
        attacks, attacks_error, updated = store.read_attacks_at(self.cfg)
        overrides = store.read_overrides(self.cfg)
        routes = self.ledger["routes"]
        plan = policy.plan(attacks, now, self.rules, overrides, routes, self.ledger["ended_seen"],
                           attacks_readable=not attacks_error, attacks_updated=updated)
        self.stale = self._staleness(policy.stale_since(updated, now, self.rules), now)
        self.ledger["ended_seen"] = plan.ended_seen
        self._refusals(plan)
        if self.bgp:
            session = self._reconcile_bgp(plan, now)
        else:
            session = {"state": "dry-run"}
            self._reconcile_dry(plan, now)
        doc = self._status_doc(plan, attacks, attacks_error, session, now)
        # the routes' outcome first (the detector and `flowlake status` read it), then the lake
        self._save()
        store.write_json(store.mitigations_file(self.cfg), doc)
        self._flush_async()
        return doc

    def _staleness(self, since: float | None, now: float) -> str:
        """The stale attacks.json rule's note for status ('' when fresh), logged when it
        turns stale and when the detector writes again."""
        if since is None:
            if self.stale:
                log.warning("mitigation: attacks.json is written again (the detector is back)")
            return ""
        auto = [e for e in self.ledger["routes"].values() if e.get("origin") == "auto"]
        note = (f"{store.attacks_file(self.cfg)} stale: last written {policy.iso(since)}, {now - since:.0f} s ago "
                f"([ddos] stale_after_seconds {self.rules.stale_after_s:g}); is the alerts service (the DDoS "
                f"detector) running? Nothing new is announced")
        if auto:
            note += (f"; the {len(auto)} automatic route(s) in force are withdrawn at "
                     f"{policy.iso(since + self.rules.hold_down_s)} (hold-down after its last update)")
        if not self.stale:
            log.warning("mitigation: %s", note)
        return note

    def _save(self) -> None:
        with self._lock:
            store.write_json(store.ledger_file(self.cfg), self.ledger)

    def _pend(self, row: dict) -> None:
        with self._lock:
            self.ledger["pending"] = (self.ledger["pending"] + [row])[-store.MAX_PENDING:]

    def _record(self, action: str, want: policy.Want | dict, reason: str, session: str, now: float) -> None:
        w = want if isinstance(want, dict) else _entry(want, now)
        route = speaker.Route(**w["route"])
        self._pend(store.event(
            action, w["method"], w["prefix"], route.key, reason, attack_ids=w.get("attack_ids", []),
            origin=w.get("origin", "auto"), community=w.get("community"), next_hop=w.get("next_hop"),
            neighbor=self.neighbor, session=session, at=now))
        if action in self.counts:
            self.counts[action] += 1
        log.warning("mitigation %s %s %s: %s", action, w["method"], route.key, reason)

    def _refusals(self, plan: policy.Plan) -> None:
        done = {tuple(r) for r in self.ledger["refused"]}
        for who, prefix, reason in plan.refused:
            if (who, prefix, reason) in done:
                continue
            self._pend(store.event("refused", self.rules.method, prefix, "", reason,
                                   attack_ids=[] if who == "operator" else [who],
                                   origin="operator" if who == "operator" else "auto", neighbor=self.neighbor,
                                   session=""))
            self.counts["refused"] += 1
            log.warning("mitigation refused %s (%s): %s", prefix, who, reason)
            done.add((who, prefix, reason))
        self.ledger["refused"] = [list(r) for r in done][-1000:]

    def _withdraw_reason(self, entry: dict, plan: policy.Plan) -> str:
        if entry.get("origin") == "operator":
            return "the operator withdrew it (`flowlake mitigation withdraw`)"
        why = [plan.status.get(aid, "") for aid in entry.get("attack_ids", [])]
        return "; ".join(w for w in why if w) or "no longer wanted"

    def _reconcile_dry(self, plan: policy.Plan, now: float) -> None:
        routes = self.ledger["routes"]
        for text in [t for t in routes if t not in plan.wanted]:
            entry = routes.pop(text)
            self._record("dry-run-withdraw", entry, self._withdraw_reason(entry, plan), "dry-run", now)
        for text, want in plan.wanted.items():
            if text not in routes:
                routes[text] = _entry(want, now)
                self._record("dry-run-announce", want, want.reason, "dry-run", now)
            routes[text]["attack_ids"] = want.attack_ids
            routes[text]["delivered"] = False

    def _reconcile_bgp(self, plan: policy.Plan, now: float) -> dict:
        routes = self.ledger["routes"]
        try:
            session = self.client.neighbor(self.neighbor)
            if session["state"] != "established":
                note = speaker.last_notification(self.cfg, self.neighbor)
                session["reason"] = (f"BGP session with {self.neighbor} port {self.cfg.ddos.neighbor_port} is "
                                     f"{session['state']}" + (f" ({note})" if note else ""))
            families = {speaker.Route(**e["route"]).family for e in routes.values()} | {
                w.route.family for w in plan.wanted.values()}
            rib = {fam: self.client.rib(fam) for fam in sorted(families & FAMILIES)}
        except (speaker.SpeakerError, ValueError) as exc:
            session = {"state": "speaker down", "reason": f"the BGP speaker (gobgpd) does not answer: {exc}"}
            rib = None
        # withdraws first: max_announcements holds at every moment
        for text in [t for t in routes if t not in plan.wanted]:
            entry = routes[text]
            route = speaker.Route(**entry["route"])
            if rib is not None:
                try:
                    if route.key in rib.get(route.family, set()):
                        self.client.delete(route)
                except speaker.SpeakerError as exc:
                    self._failed(entry, f"withdraw: {exc}", session, now)
                    continue
            del routes[text]
            self._record("withdraw", entry, self._withdraw_reason(entry, plan), session["state"], now)
        for text, want in plan.wanted.items():
            entry = routes.setdefault(text, _entry(want, now))
            entry["attack_ids"], entry["reason"] = want.attack_ids, want.reason
            if rib is None:
                self._failed(entry, session["reason"], session, now)
                continue
            if want.route.key not in rib.get(want.route.family, set()):
                try:
                    self.client.add(want.route)
                except speaker.SpeakerError as exc:
                    self._failed(entry, f"gobgpd refused the route: {exc}", session, now)
                    continue
            if session["state"] == "established":
                if not entry.get("delivered"):
                    entry["delivered"], entry["failed"] = True, ""
                    entry["announced_at"] = now
                    self._record("announce", entry, want.reason + (" (retried)" if entry.get("failures") else ""),
                                 session["state"], now)
            else:
                self._failed(entry, session["reason"], session, now)
        return session

    def _failed(self, entry: dict, reason: str, session: dict, now: float) -> None:
        entry["delivered"] = False
        if entry.get("failed") != reason:
            entry["failed"] = reason
            entry["failures"] = entry.get("failures", 0) + 1
            self._record("failed", entry, reason + " (retrying)", session.get("state", ""), now)

    # ---- outputs ------------------------------------------------------------------------
    def _status_doc(self, plan, attacks, attacks_error, session, now) -> dict:
        routes = self.ledger["routes"]
        by_attack = dict(plan.status)
        for aid, text in plan.route_of.items():
            entry = routes.get(text)
            if entry is None:
                continue
            what = f"{entry['method']} {speaker.Route(**entry['route']).key}"
            if not self.bgp:
                s = f"dry-run: would announce {what}"
            elif entry.get("delivered"):
                s = f"announced {what}"
            else:
                s = f"failed: {entry.get('failed') or 'not yet delivered'} (retrying)"
            want = plan.wanted.get(text)
            if want is not None and not want.open and want.hold_until:
                s += f" (attack ended; withdrawn at {policy.iso(want.hold_until)})"
            by_attack[aid] = s
        previous = self.ledger.get("statuses", {})
        for aid, s in list(by_attack.items()):
            if s.startswith(("not announced (ended)", "not announced: attacks.json stale")) and \
                    str(previous.get(aid, "")).startswith("withdrawn"):
                by_attack[aid] = previous[aid]
        self.ledger["statuses"] = {a: s for a, s in by_attack.items() if a in {str(x.get("id")) for x in attacks}}
        announcements = [{"route": speaker.Route(**e["route"]).key, "family": e["route"]["family"],
                          "method": e["method"], "prefix": e["prefix"], "origin": e["origin"],
                          "attack_ids": e.get("attack_ids", []), "since": policy.iso(e["since"]),
                          "delivered": bool(e.get("delivered")), "failed": e.get("failed", ""),
                          "reason": e.get("reason", "")} for e in routes.values()]
        return {"updated": policy.iso(now), "heartbeat": now, "pid": os.getpid(), "mode": self.rules.mode,
                "neighbor": self.neighbor, "session": session, "by_attack": by_attack,
                "announcements": announcements, "in_force": sum(1 for a in announcements if a["delivered"]),
                "attacks_open": sum(1 for a in attacks if a.get("ended") is None),
                "attacks_error": attacks_error, "attacks_stale": self.stale, "lake_error": self.lake_error,
                "pending_events": len(self.ledger["pending"]), "events": dict(self.counts),
                "max_announcements": self.rules.max_announcements}

    def _flush_async(self) -> None:
        """Pending events into lake/mitigations/ on a writer thread (one at a time)."""
        if self._writer is not None and self._writer.is_alive():
            return
        with self._lock:
            batch = list(self.ledger["pending"])
        if batch:
            self._writer = threading.Thread(target=self._write, args=(batch,), name="mitigation-lake", daemon=True)
            self._writer.start()

    def _write(self, batch: list[dict]) -> bool:
        try:
            self.events.append(batch)
        except Exception as exc:  # noqa: BLE001  (the lake away: the routes still go; kept and retried)
            self.lake_error = f"lake/mitigations: {exc}"
            log.warning("mitigation events not written (kept, retried): %s", exc)
            return False
        with self._lock:
            pending = self.ledger["pending"]
            n = len(batch) if pending[:len(batch)] == batch else 0
            self.ledger["pending"] = pending[n:] if n else [e for e in pending if e not in batch]
        self.lake_error = ""
        self._save()
        return True

    def drain(self, timeout: float = 25.0) -> None:
        """At the end: wait for the writer, then write what is left (a writer still busy
        keeps its events pending in the ledger: the next start writes them)."""
        if self._writer is not None:
            self._writer.join(timeout)
            if self._writer.is_alive():
                log.warning("mitigation events: the lake write did not finish in %.0f s; kept for the next start",
                            timeout)
                return
        with self._lock:
            batch = list(self.ledger["pending"])
        if batch:
            self._write(batch)


def _entry(want: policy.Want, now: float) -> dict:
    return {"route": asdict(want.route), "method": want.method, "prefix": want.prefix, "origin": want.origin,
            "attack_ids": list(want.attack_ids), "reason": want.reason, "community": want.community,
            "next_hop": want.next_hop, "since": now, "delivered": False, "failed": ""}


def serve(cfg, once: bool = False) -> None:
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    loop = Loop(cfg)
    log.warning("mitigation loop: mode %s, neighbor %s", loop.rules.mode, loop.neighbor or "-")
    try:
        while not stopping:
            started = time.monotonic()
            try:
                loop.tick()
            except Exception:  # noqa: BLE001  (one bad round must not end the loop; logged with its trace)
                log.exception("mitigation round failed")
            if once:
                break
            time.sleep(max(0.05, TICK_S - (time.monotonic() - started)))
    finally:
        loop.drain()


# ---- supervision and status --------------------------------------------------------------

def managed(cfg) -> Managed:
    return Managed("mitigation", cfg.path("run"), cfg.path("log"))


def start(cfg) -> int | None:
    """Start the loop when [ddos] enabled and mitigation is not off; healthy once it wrote
    its first status (mitigations.json with its pid)."""
    if not wanted(cfg):
        return None
    policy.rules_from_config(cfg)  # a bad value fails here, naming it, not in the background
    proc = managed(cfg)
    if proc.running():
        return proc.pid()
    pid = proc.start(python_argv("mitigation", "serve"))
    wait_until(lambda: store.read_status(cfg).get("pid") == pid, 60, "the mitigation loop to start",
               interval=0.2, proc=proc)
    return pid


def stop(cfg) -> bool:
    return managed(cfg).stop(timeout=30)


def status(cfg) -> dict:
    """For `flowlake status`: mode, session, announcements in force, attacks open."""
    out: dict = {"enabled": wanted(cfg), "mode": cfg.ddos.mitigation}
    if not out["enabled"] and not managed(cfg).running():
        return out
    doc = store.read_status(cfg)
    out["running"] = managed(cfg).running()
    for key in ("neighbor", "session", "announcements", "in_force", "attacks_open", "attacks_error", "attacks_stale",
                "lake_error", "events", "updated", "max_announcements"):
        if key in doc:
            out[key] = doc[key]
    if not out["running"]:
        attacks, err = store.read_attacks(cfg)
        out["attacks_open"] = sum(1 for a in attacks if a.get("ended") is None)
    return out


def print_status(console, st: dict) -> None:
    if not st.get("enabled") and not st.get("running"):
        return
    if not st.get("running"):
        console.print(f"Mitigation ({st['mode']}): not running (`flowlake up` starts it); "
                      f"attacks open {st.get('attacks_open', 0)}")
        return
    session = st.get("session") or {}
    state = session.get("state", "?")
    line = f"Mitigation ({st['mode']})"
    if st["mode"] != "dry-run":
        line += f": BGP session with {st.get('neighbor')} {state}"
    anns = st.get("announcements") or []
    kind = "routes it would announce" if st["mode"] == "dry-run" else "announcements in force"
    n = len(anns) if st["mode"] == "dry-run" else st.get("in_force", 0)
    line += f"; {n} {kind} (max {st.get('max_announcements')}); attacks open {st.get('attacks_open', 0)}"
    console.print(line, soft_wrap=True)
    if session.get("reason"):
        console.print(f"  [bold red]{session['reason']}[/]", soft_wrap=True)
    for a in anns:
        mark = "" if a["delivered"] or st["mode"] == "dry-run" else f" [bold red]not delivered: {a['failed']}[/]"
        ids = ", " + ",".join(a["attack_ids"]) if a["attack_ids"] else ""
        console.print(f"  {a['method']} {a['route']} ({a['origin']}{ids}"
                      f", since {a['since']}){mark}", soft_wrap=True)
    for key in ("attacks_error", "attacks_stale", "lake_error"):
        if st.get(key):
            console.print(f"  [bold red]{st[key]}[/]", soft_wrap=True)


class Mitigation(ModuleComponent):
    """The mitigation loop ([ddos] enabled and mitigation dry-run, rtbh or flowspec)."""
    name = "mitigation"
    stop_timeout = 30.0
    settings_type = MitigationSettings
    section = "ddos"
    functions = sys.modules[__name__]

    def enabled(self) -> bool:
        return wanted(self.cfg)
