"""What every notification channel shares: the two kinds of failure (retry or give up),
the idempotency key of one notification, timestamps as ISO text."""
from __future__ import annotations

import datetime as dt


class Transient(Exception):
    """Delivery failed but may work later (connection refused, timeout, HTTP 5xx, SMTP 4xx)."""


class Permanent(Exception):
    """Delivery will not work by retrying (rejected signature, unknown recipient, bad certificate)."""


def iso(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:  # the lake's timestamps are naive UTC
            value = value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)



def idempotency_key(alert: dict) -> str:
    """The same for every retry of one notification, different for the next event of the alert."""
    return f"{alert['id']}:{alert['event']}:{iso(alert['updated'])}"

