"""Alert lifecycle: findings -> alerts opened, updated while the condition lasts,
resolved after [alerts] resolve_after_seconds without it; one open alert per
(detector, subject) (deduplicated); acknowledged and snoozed by people (the CLI writes the
store, the service reads those fields back before each interval).

Each transition is an event handed to every sink's submit(alert): the alert's JSON object
(schemas.alerts.ALERT_JSON) plus "event": "opened" | "updated" | "resolved". Snoozed
alerts notify nothing until the snooze ends; acknowledged ones only their resolution;
"updated" is sent when the severity rises, or at most every update_notify_seconds.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time

from flowlake.schemas.alerts import ALERT_JSON, SEVERITIES

from .base import Finding
from .store import AlertStore, day_of, iso

log = logging.getLogger(__name__)
RANK = {s: i for i, s in enumerate(SEVERITIES)}


def public(alert: dict, now_ms: int | None = None) -> dict:
    """The alert as `flowlake alerts list --json` prints it (exactly ALERT_JSON's keys)."""
    out = {k: alert[k] for k in ALERT_JSON}
    out["state"] = shown_state(alert, now_ms)
    for k in ("started", "updated", "ended"):
        out[k] = iso(alert[k])
    return out


def shown_state(alert: dict, now_ms: int | None = None) -> str:
    """The stored state, with a snooze that ran out shown as what it returns to."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if alert["state"] == "snoozed" and (alert.get("snoozed_until") or 0) <= now_ms:
        return "acknowledged" if alert.get("acked_at") else "open"
    return alert["state"]


def new_id(detector: str, subject: str, started_ms: int) -> str:
    return hashlib.sha1(f"{detector}|{subject}|{started_ms}".encode()).hexdigest()[:12]


class Lifecycle:
    def __init__(self, store: AlertStore, sinks=(), resolve_after_seconds: float = 60,
                 update_notify_seconds: float = 300, max_open: int = 500):
        self.store, self.sinks = store, list(sinks)
        self.resolve_ms, self.update_ms = resolve_after_seconds * 1000, update_notify_seconds * 1000
        self.max_open = max_open
        self.open: dict[tuple[str, str], dict] = {}
        self.snoozes: dict[tuple[str, str], int] = {}  # a snooze outlives its alert: it covers a reopening
        self.notified: dict[str, int] = {}             # alert id -> flow time of its last notification
        self.counts = {"opened": 0, "updated": 0, "resolved": 0, "suppressed": 0, "notified": 0}

    @classmethod
    def from_config(cls, cfg, store: AlertStore, sinks=()) -> "Lifecycle":
        a = cfg.alerts
        return cls(store, sinks, float(a.resolve_after_seconds), float(a.update_notify_seconds), int(a.max_open))

    def load(self) -> None:
        """Open alerts and live snoozes from the store (after a restart)."""
        now = int(time.time() * 1000)
        with self.store.lock():
            rows = self.store.read()
        for a in rows:
            key = (a["detector"], a["subject"])
            if a["state"] != "resolved":
                self.open[key] = a
            elif (a.get("snoozed_until") or 0) > now:
                self.snoozes[key] = a["snoozed_until"]

    def _refresh(self, now_ms: int) -> None:
        """Take the people's changes (ack, snooze) made since the last interval: to open
        alerts, and snoozes of resolved ones (of the last two days), which cover a reopening."""
        days = {day_of(a["started"]) for a in self.open.values()} | {day_of(now_ms), day_of(now_ms - 86_400_000)}
        days = {d for d in days if self.store.changed_since_read(d)}
        stored = {r["id"]: r for d in days for r in self.store.read_day(d)}
        for r in stored.values():
            if r["state"] == "resolved" and (r.get("snoozed_until") or 0) > now_ms:
                key = (r["detector"], r["subject"])
                self.snoozes[key] = max(self.snoozes.get(key, 0), r["snoozed_until"])
        for a in self.open.values():
            s = stored.get(a["id"])
            if s is None:
                continue
            for k in ("acked_at", "acked_by", "snoozed_until"):
                a[k] = s[k]
            if s["state"] in ("acknowledged", "snoozed") and a["state"] != "resolved":
                a["state"] = s["state"]

    def _emit(self, alert: dict, event: str, at_ms: int) -> None:
        self.counts[event] += 1
        if alert["state"] == "snoozed" or (event == "updated" and alert["state"] == "acknowledged"):
            return
        self.notified[alert["id"]] = at_ms
        payload = {**public(alert), "event": event}
        for sink in self.sinks:
            try:
                sink.submit(payload)  # non-blocking by contract; a failing sink must not stop detection
                self.counts["notified"] += 1
            except Exception as exc:
                log.error("alert sink %r failed on %s %s: %s", sink, event, alert["id"], exc)

    def apply(self, end_ms: int, findings: list[Finding], now_ms: int | None = None) -> list[dict]:
        """One interval's findings (flow time end_ms): transitions made, stored, sent."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        changed: dict[str, dict] = {}
        with self.store.lock():
            self._refresh(now_ms)
            fired = set()
            for f in sorted(findings, key=lambda f: -f.value):
                key = (f.detector, f.subject)
                if key in fired:
                    continue
                fired.add(key)
                a = self.open.get(key)
                if a is None:
                    if len(self.open) >= self.max_open:
                        self.counts["suppressed"] += 1
                        continue
                    a = self._open(f, end_ms, now_ms)
                    self.open[key] = a
                    self._emit(a, "opened", end_ms)
                else:
                    rose = RANK[f.severity] > RANK[a["severity"]]
                    a.update(updated=end_ms, summary=f.summary, intervals=a["intervals"] + 1,
                             details=_json(f.details))
                    if f.value >= a["value"]:
                        a["value"], a["threshold"] = f.value, f.threshold
                    if rose:
                        a["severity"] = f.severity
                    if rose or end_ms - self.notified.get(a["id"], a["started"]) >= self.update_ms:
                        self._emit(a, "updated", end_ms)
                changed[a["id"]] = a
            for key, a in list(self.open.items()):
                if a["state"] == "snoozed" and (a.get("snoozed_until") or 0) <= now_ms:
                    a["state"] = "acknowledged" if a.get("acked_at") else "open"
                    changed[a["id"]] = a
                if key not in fired and end_ms - a["updated"] >= self.resolve_ms:
                    snoozed = a["state"] == "snoozed"
                    a.update(state="resolved", ended=a["updated"], resolved_at=end_ms)
                    if snoozed:
                        self.snoozes[key] = a["snoozed_until"]
                        self.counts["resolved"] += 1
                    else:
                        self._emit(a, "resolved", end_ms)
                    del self.open[key]
                    self.notified.pop(a["id"], None)
                    changed[a["id"]] = a
            if changed:
                self.store.save(list(changed.values()))
        return list(changed.values())

    def _open(self, f: Finding, end_ms: int, now_ms: int) -> dict:
        key = (f.detector, f.subject)
        until = self.snoozes.pop(key, None)
        if until is not None and until <= now_ms:
            until = None
        return {"id": new_id(f.detector, f.subject, end_ms), "detector": f.detector, "subject": f.subject,
                "state": "snoozed" if until else "open", "severity": f.severity or "warning",
                "started": end_ms, "updated": end_ms, "ended": None, "resolved_at": None, "summary": f.summary,
                "value": float(f.value), "threshold": float(f.threshold), "intervals": 1, "acked_at": None,
                "acked_by": None, "snoozed_until": until, "details": _json(f.details)}

    def open_by_severity(self) -> dict:
        out = {s: 0 for s in SEVERITIES}
        for a in self.open.values():
            out[a["severity"]] += 1
        return out


def _json(details: dict) -> str:
    return json.dumps(details, default=str, sort_keys=True)
