"""`flowlake notify test`: the operator's check of the [notify] configuration."""
from __future__ import annotations

import datetime as dt
import json
import logging
import socket
import uuid
from dataclasses import replace

import click

from flowlake.base import config

from .notify import Notifier, build_channels, iso, retry_from, write_state

TEST_STATE_FILE = "notify-test.json"


def test_alert() -> dict:
    now = dt.datetime.now(dt.timezone.utc)
    host = socket.gethostname()
    return {"id": f"test-{uuid.uuid4().hex[:12]}", "detector": "notify_test", "subject": host, "state": "open",
            "severity": "info", "started": now, "updated": now, "ended": None, "event": "opened", "test": True,
            "summary": f"Test notification from flowlake on {host}: this channel works (flowlake notify test)."}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def notify():
    """Alert notifications: webhook and e-mail ([notify] in flowlake.toml).

    \b
    The stack sends one notification per alert event (opened, updated, resolved)
    to every configured channel; `flowlake status` shows per channel how many were
    sent, failed, are retrying or were dropped from a full queue.
    """


@notify.command("test")
@click.option("--attempts", default=1, show_default=True, type=click.IntRange(1, 20),
              help="Tries per channel (1: report the first failure at once; more: retry with [notify] backoff).")
@click.option("--timeout", "timeout", default=60.0, show_default=True, type=float,
              help="Seconds to wait for every channel in all.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
def test_cmd(attempts: int, timeout: float, as_json: bool):
    """Send a test alert through every configured channel and say what happened.

    The test alert has severity info and is sent whatever a channel's
    min_severity. A channel that fails prints the reason (connection refused,
    HTTP 401 from a receiver that rejects the signature, SMTP AUTH refused, a
    certificate that does not verify, ...). Exit status 1 if any channel failed,
    2 if nothing is configured. The result is kept for `flowlake status`.

    \b
    Examples:
      FLOWLAKE_NOTIFY_WEBHOOK_URL=https://hooks.example.org/flowlake \\
      FLOWLAKE_NOTIFY_WEBHOOK_SECRET=s3cret flowlake notify test
      FLOWLAKE_NOTIFY_SMTP_HOST=mail.example.org FLOWLAKE_NOTIFY_SMTP_TO=noc@example.org \\
      FLOWLAKE_NOTIFY_SMTP_USERNAME=flowlake FLOWLAKE_NOTIFY_SMTP_PASSWORD=... flowlake notify test
    """
    cfg = config.get()
    channels = build_channels(cfg)
    if not channels:
        raise click.UsageError("no notification channel is configured: set [notify] webhook_url "
                               "(and a secret) or smtp_host and smtp_to (see flowlake.toml)")
    for c in channels:
        c.min_severity = ""  # the test goes through whatever the channel's threshold
    if not as_json:  # the result lines below say it all; the sender's log would repeat it
        logging.getLogger("flowlake.notify").setLevel(logging.CRITICAL)
    notifier = Notifier(channels, queue_size=1, retry=replace(retry_from(cfg), max_attempts=attempts),
                        state_file=None)
    alert = test_alert()
    notifier.submit(alert)
    stats = notifier.close(timeout=timeout)
    result = {"at": iso(dt.datetime.now(dt.timezone.utc)), "alert_id": alert["id"], "channels": {
        name: {"ok": s["sent"] == 1, "target": s["target"], "tries": s["sent"] + s["failed"] + s["retries"],
               "error": None if s["sent"] == 1 else (s["last_error"] or "not delivered within --timeout")}
        for name, s in stats.items()}}
    write_state(cfg.path("state", TEST_STATE_FILE), result)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        for name, r in result["channels"].items():
            if r["ok"]:
                click.echo(f"{name}: sent to {r['target']} ({r['tries']} {'try' if r['tries'] == 1 else 'tries'})")
            else:
                click.echo(f"{name}: FAILED to {r['target']}: {r['error']}")
    if not all(r["ok"] for r in result["channels"].values()):
        raise SystemExit(1)
