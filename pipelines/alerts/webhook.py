"""Webhook channel: one signed JSON POST per alert event.

Body (UTF-8 JSON): {"source": "flowlake", "event": ..., "idempotency_key": ..., "alert": {...}}.
Headers:
  X-Flowlake-Timestamp: seconds since the epoch when this try was signed
  X-Flowlake-Signature: sha256=HEX, HMAC-SHA256(secret, timestamp + "." + raw body)
  Idempotency-Key:      alert id:event:updated, the same on every retry
A receiver recomputes the HMAC over the raw body it read, compares in constant time, rejects
timestamps older than its tolerance (a captured request cannot be replayed later: the timestamp
is signed) and remembers idempotency keys it has processed (a retry after a lost answer is then
answered 2xx and not processed twice). `verify()` below does the first two.

Answers: 2xx = delivered; 408, 425, 429 and 5xx, connection errors and timeouts are retried;
other 4xx (a rejected signature: 401) are permanent and counted as failed at once.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import time
from urllib.parse import urlsplit

from flowlake.base.config import ConfigError

from .delivery import Permanent, Transient, idempotency_key

RETRY_STATUS = {408, 425, 429}
SIGNATURE_HEADER = "X-Flowlake-Signature"
TIMESTAMP_HEADER = "X-Flowlake-Timestamp"


def payload(alert: dict) -> bytes:
    return json.dumps({"source": "flowlake", "event": alert["event"], "idempotency_key": idempotency_key(alert),
                       "alert": alert}, sort_keys=True, separators=(",", ":")).encode()


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def verify(secret: bytes, timestamp: str, body: bytes, signature: str, tolerance: float = 300,
           now: float | None = None) -> bool:
    """A receiver's check: the signature matches and the timestamp is within `tolerance` seconds."""
    try:
        age = abs((time.time() if now is None else now) - int(timestamp))
    except (TypeError, ValueError):
        return False
    return age <= tolerance and hmac.compare_digest(sign(secret, timestamp, body), signature or "")


class Webhook:
    name = "webhook"

    def __init__(self, url: str, secret: bytes, timeout: float = 10.0, min_severity: str = ""):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"[notify] webhook_url = {url!r}: not an http:// or https:// URL")
        self.url, self.secret, self.timeout, self.min_severity = url, secret, timeout, min_severity
        self.target = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"  # no credentials
        import requests  # noqa: PLC0415  (start-up: requests)

        self._session = requests.Session()

    def send(self, alert: dict) -> None:
        import requests  # noqa: PLC0415  (start-up: requests)

        body = payload(alert)
        ts = str(int(time.time()))  # signed afresh on every try: a late retry is not a replay
        headers = {"Content-Type": "application/json", "User-Agent": "flowlake-notify/1",
                   TIMESTAMP_HEADER: ts, SIGNATURE_HEADER: sign(self.secret, ts, body),
                   "Idempotency-Key": idempotency_key(alert), "X-Flowlake-Event": alert["event"]}
        try:
            resp = self._session.post(self.url, data=body, headers=headers, timeout=self.timeout,
                                      allow_redirects=False)
        except requests.RequestException as exc:
            raise Transient(f"POST {self.target}: {type(exc).__name__}: {_short(exc)}") from None
        if 200 <= resp.status_code < 300:
            return
        what = f"POST {self.target}: HTTP {resp.status_code} {resp.reason}: {resp.text[:200].strip()}"
        if resp.status_code in RETRY_STATUS or resp.status_code >= 500:
            raise Transient(what)
        raise Permanent(what)


def _short(exc: Exception) -> str:
    text = str(exc)
    # requests nests urllib3's long messages: keep the innermost reason
    for marker in ("Caused by ", "Failed to establish a new connection: "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return text.strip("()'\" ")[:200]
