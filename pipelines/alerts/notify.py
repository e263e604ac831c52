"""Alert notifications that never hold up the detectors.

`build_notifier(cfg)` reads `[notify]` and returns a `Notifier` (None when no channel is
configured). `Notifier.submit(alert)` copies the alert into one bounded queue per channel and
returns at once; a sender thread per channel delivers it, retrying transient failures with
exponential backoff and jitter up to `max_attempts`. A full queue drops its oldest alert (counted):
a receiver that is down for hours costs memory of `queue_size` alerts, never the pipeline's time.
Channels are independent: a dead webhook does not delay e-mail.

Counters (sent, failed, retrying, dropped, ...) are kept per channel, cumulative across restarts,
in `$FLOWLAKE_HOME/state/notify.json`, which `flowlake status` shows.

The alert dict (the contract with pipelines/alerts' lifecycle): id, detector, subject, state,
severity, started, updated, ended, summary, and event = "opened" | "updated" | "resolved".
Times may be datetimes or ISO strings; they are sent as ISO 8601 UTC.
"""
from __future__ import annotations

import collections
import datetime as dt
import json
import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from flowlake.base.config import ConfigError

from .delivery import Permanent, Transient, idempotency_key, iso  # noqa: F401  (re-exported for the channels' callers)

log = logging.getLogger("flowlake.notify")

FIELDS = ("id", "detector", "subject", "state", "severity", "started", "updated", "ended", "summary", "event")
EVENTS = ("opened", "updated", "resolved")
# Ascending; a channel's min_severity lets through its level and the ones after it. An alert
# with a severity not listed here is always sent (better one mail too many than a lost alert).
SEVERITIES = ("info", "warning", "critical")
STATE_FILE = "notify.json"
TOTALS = ("sent", "failed", "retries", "dropped", "filtered")  # cumulative counters, persisted




class Channel(Protocol):
    name: str            # "webhook", "email": the key in stats() and status
    min_severity: str    # "" = every alert
    target: str          # where it sends, for status (no secrets)

    def send(self, alert: dict) -> None:
        """Deliver one alert or raise Transient / Permanent."""




def normalise(alert: dict) -> dict:
    """A JSON-ready copy of the alert; a clear error if the contract's keys are missing."""
    if not isinstance(alert, dict):
        raise ValueError(f"alert: expected a dict, got {type(alert).__name__}")
    missing = [k for k in FIELDS if k not in alert]
    if missing:
        raise ValueError(f"alert {alert.get('id', '?')}: missing {', '.join(missing)} (needs {', '.join(FIELDS)})")
    if alert["event"] not in EVENTS:
        raise ValueError(f"alert {alert['id']}: event {alert['event']!r} is not one of {', '.join(EVENTS)}")
    out = json.loads(json.dumps(alert, default=iso))  # a deep copy: the caller may change its dict
    for k in ("started", "updated", "ended"):
        out[k] = iso(alert[k])
    return out




def passes(severity: str, min_severity: str) -> bool:
    if not min_severity or severity not in SEVERITIES:
        return True
    return SEVERITIES.index(severity) >= SEVERITIES.index(min_severity)


@dataclass(frozen=True)
class Retry:
    max_attempts: int = 8          # tries per alert (1 = no retry)
    backoff_seconds: float = 1.0   # the first wait; doubles per try
    backoff_max_seconds: float = 60.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Wait after failed try `attempt` (1-based): exponential, capped, half of it jittered
        so that many flowlake instances do not hammer a receiver that comes back in step."""
        d = min(self.backoff_max_seconds, self.backoff_seconds * 2 ** (attempt - 1))
        return d / 2 + rng.uniform(0, d / 2)


class _Sender:
    """One channel's queue and thread."""

    def __init__(self, channel: Channel, queue_size: int, retry: Retry, notifier: "Notifier", totals: dict):
        self.channel = channel
        self.retry = retry
        self.queue: collections.deque = collections.deque()
        self.queue_size = queue_size
        self.cond = threading.Condition()
        self.closing = False
        self.stop = threading.Event()
        self.notifier = notifier
        self.rng = random.Random()
        self.counts = {k: int(totals.get(k, 0)) for k in TOTALS}
        self.counts.update(retrying=0, last_error=totals.get("last_error"), last_error_at=totals.get("last_error_at"),
                           last_sent_at=totals.get("last_sent_at"))
        self.thread = threading.Thread(target=self._run, name=f"notify-{channel.name}", daemon=True)
        self.thread.start()

    def put(self, alert: dict) -> None:
        with self.cond:
            if not passes(alert["severity"], self.channel.min_severity):
                self.counts["filtered"] += 1
            else:
                if len(self.queue) >= self.queue_size:
                    old = self.queue.popleft()
                    self.counts["dropped"] += 1
                    if self.counts["dropped"] % 100 == 1:  # a flood against a dead receiver: not a log line per alert
                        log.warning("%s: queue full (%d), dropped the oldest alert %s (%d dropped so far)",
                                    self.channel.name, self.queue_size, idempotency_key(old), self.counts["dropped"])
                self.queue.append(alert)
            self.notifier._dirty = True
            self.cond.notify()

    def stats(self) -> dict:
        with self.cond:
            return {**self.counts, "queued": len(self.queue), "target": self.channel.target,
                    "min_severity": self.channel.min_severity or "all"}

    def _next(self) -> dict | None:
        while True:
            with self.cond:
                if self.queue:
                    return self.queue.popleft()
                if self.closing or self.stop.is_set():
                    return None
                self.cond.wait(1.0)
            # outside the lock (persisting reads every channel's counters): writes what
            # submit() changed meanwhile (drops, filters)
            self.notifier._persist()

    def _run(self) -> None:
        while (alert := self._next()) is not None:
            self._deliver(alert)
            self.notifier._persist()

    def _count(self, **changes) -> None:
        with self.cond:
            for k, v in changes.items():
                self.counts[k] = self.counts[k] + v if k in TOTALS else v
            self.notifier._dirty = True

    def _deliver(self, alert: dict) -> None:
        name, key = self.channel.name, idempotency_key(alert)
        attempt = 0
        while True:
            attempt += 1
            try:
                self.channel.send(alert)
            except Transient as exc:
                err = f"{exc} (try {attempt} of {self.retry.max_attempts})"
                if attempt >= self.retry.max_attempts:
                    log.error("%s: giving up on %s: %s", name, key, err)
                    self._count(failed=1, retrying=0, last_error=err, last_error_at=iso(_now()))
                    return
                wait = self.retry.delay(attempt, self.rng)
                log.warning("%s: %s failed, retrying in %.1f s: %s", name, key, wait, err)
                self._count(retries=1, retrying=1, last_error=err, last_error_at=iso(_now()))
                self.notifier._persist()
                if self.stop.wait(wait):  # closing ran out of time: this alert is abandoned
                    self._count(dropped=1, retrying=0)
                    return
                continue
            except Exception as exc:  # Permanent, or a bug in a channel: never kill the thread
                err = f"{exc}" if isinstance(exc, Permanent) else f"{type(exc).__name__}: {exc}"
                log.error("%s: %s not delivered: %s", name, key, err)
                self._count(failed=1, retrying=0, last_error=err, last_error_at=iso(_now()))
                return
            self._count(sent=1, retrying=0, last_sent_at=iso(_now()))
            return


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class Notifier:
    def __init__(self, channels: list[Channel], queue_size: int = 1000, retry: Retry = Retry(),
                 state_file: Path | None = None, cumulative: bool = True):
        if not channels:
            raise ValueError("a Notifier needs at least one channel")
        if queue_size < 1:
            raise ValueError(f"queue_size = {queue_size}: must be at least 1")
        self.state_file = Path(state_file) if state_file else None
        self._state_lock = threading.Lock()
        self._dirty = True
        self._written = 0.0
        self._write_failed = False
        self._closed = False
        before = read_state(self.state_file).get("channels", {}) if (self.state_file and cumulative) else {}
        self._senders = {c.name: _Sender(c, queue_size, retry, self, before.get(c.name, {})) for c in channels}

    @property
    def channels(self) -> list[str]:
        return list(self._senders)

    def submit(self, alert: dict) -> None:
        """Queue an alert for every channel and return at once (never waits for a receiver)."""
        if self._closed:
            raise RuntimeError("submit() after close(): this Notifier has stopped its senders")
        alert = normalise(alert)
        for sender in self._senders.values():
            sender.put(alert)

    def stats(self) -> dict:
        """Per channel: sent, failed, retries (tries that failed and were repeated), retrying
        (an alert waiting for its next try), dropped (oldest dropped from a full queue, or left
        at close), filtered (below the channel's min_severity), queued, last_error, last_sent_at."""
        return {name: s.stats() for name, s in self._senders.items()}

    def close(self, timeout: float = 10.0) -> dict:
        """Deliver what is queued, waiting at most `timeout` seconds in all; whatever is left then
        counts as dropped. Returns the final stats."""
        self._closed = True
        deadline = time.monotonic() + timeout
        for s in self._senders.values():
            with s.cond:
                s.closing = True
                s.cond.notify_all()
        for s in self._senders.values():
            s.thread.join(max(0.0, deadline - time.monotonic()))
        for s in self._senders.values():
            if s.thread.is_alive():
                with s.cond:
                    left = len(s.queue)
                    s.queue.clear()
                    s.counts["dropped"] += left
                    s.stop.set()
                    s.cond.notify_all()
                if left:
                    log.warning("%s: closing, %d queued alert(s) not delivered", s.channel.name, left)
        for s in self._senders.values():
            s.thread.join(5.0)  # a send in progress ends within the channel's own timeout
        self._persist(force=True)
        return self.stats()

    def _persist(self, force: bool = False) -> None:
        """Write the counters (at most once a second unless forced): status reads them."""
        if self.state_file is None or not (self._dirty or force):
            return
        if not force and time.monotonic() - self._written < 1.0:
            return
        with self._state_lock:
            self._dirty = False
            self._written = time.monotonic()
            data = {"updated": iso(_now()), "pid": os.getpid(), "channels": self.stats()}
            try:
                write_state(self.state_file, data)
            except OSError as exc:  # a full or read-only disk must not stop the senders
                if not self._write_failed:
                    log.error("cannot write notification counters to %s: %s", self.state_file, exc)
                self._write_failed = True
            else:
                self._write_failed = False


def read_state(path: Path | None) -> dict:
    try:
        return json.loads(Path(path).read_text()) if path else {}
    except (OSError, ValueError):
        return {}


def write_state(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)  # status never reads half a file


# ---- configuration ------------------------------------------------------------------------
def secret(section: dict, key: str, base_dir: Path) -> str:
    """`key` itself (flowlake.toml or FLOWLAKE_NOTIFY_<KEY>), else the file named by `key`_file."""
    if section.get(key):
        return section[key]
    name = section.get(f"{key}_file") or ""
    if not name:
        return ""
    path = Path(os.path.expanduser(name))
    path = path if path.is_absolute() else base_dir / path
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"[notify] {key}_file = {name!r}: cannot read {path}: {exc.strerror}") from None


def build_channels(cfg) -> list[Channel]:
    """The channels `[notify]` configures (none: an empty list); ConfigError names a bad key."""
    n = cfg.notify.as_dict()
    for key in ("webhook_min_severity", "smtp_min_severity"):
        if n[key] and n[key] not in SEVERITIES:
            raise ConfigError(f"[notify] {key} = {n[key]!r}: use one of {', '.join(SEVERITIES)} or \"\" (all)")
    out: list[Channel] = []
    if n["webhook_url"]:
        from .webhook import Webhook  # noqa: PLC0415  (start-up: flowlake status)

        key = secret(n, "webhook_secret", cfg.base_dir)
        if not key:
            raise ConfigError("[notify] webhook_url is set but there is no signing secret: set "
                              "FLOWLAKE_NOTIFY_WEBHOOK_SECRET or webhook_secret_file")
        out.append(Webhook(n["webhook_url"], key.encode(), timeout=n["webhook_timeout_seconds"],
                           min_severity=n["webhook_min_severity"]))
    if n["smtp_host"]:
        from .smtp import Email  # noqa: PLC0415  (start-up: flowlake status)

        if not n["smtp_to"]:
            raise ConfigError("[notify] smtp_host is set but smtp_to lists no recipient")
        if n["smtp_security"] not in ("starttls", "none"):
            raise ConfigError(f"[notify] smtp_security = {n['smtp_security']!r}: use starttls or none")
        password = secret(n, "smtp_password", cfg.base_dir)
        if n["smtp_username"] and n["smtp_security"] == "none":
            raise ConfigError("[notify] smtp_username is set with smtp_security = \"none\": "
                              "AUTH would send the password in clear; use starttls")
        out.append(Email(host=n["smtp_host"], port=n["smtp_port"], sender=n["smtp_from"], to=list(n["smtp_to"]),
                         security=n["smtp_security"], username=n["smtp_username"], password=password,
                         cafile=n["smtp_cafile"], timeout=n["smtp_timeout_seconds"],
                         min_severity=n["smtp_min_severity"]))
    return out


def retry_from(cfg) -> Retry:
    n = cfg.notify
    return Retry(max(1, n.max_attempts), n.backoff_seconds, n.backoff_max_seconds)


def build_notifier(cfg) -> Notifier | None:
    """The stack's notifier from `[notify]`, or None when no channel is configured."""
    channels = build_channels(cfg)
    if not channels:
        return None
    return Notifier(channels, queue_size=cfg.notify.queue_size, retry=retry_from(cfg),
                    state_file=cfg.path("state", STATE_FILE))
