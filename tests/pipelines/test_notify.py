"""Alert notifications (issue 24) against real receivers on free loopback ports:
a webhook receiver in its own process (tests/webhook_receiver.py, which checks signatures the
way the README tells receivers to and de-duplicates by idempotency key) and a real SMTP server
(aiosmtpd) that requires STARTTLS and AUTH. What arrives is compared with what was submitted;
the receiver going down and coming back must cost retries, never the caller's time."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from flowlake.base.ports import free_port
from flowlake.base.process import port_open, wait_until

REPO = Path(__file__).resolve().parents[2]
RECEIVER = Path(__file__).resolve().parents[1] / "webhook_receiver.py"
SECRET = "webhook-test-secret-\u00e9"  # not ASCII: the key is bytes of its UTF-8
T0 = dt.datetime(2026, 11, 25, 3, 0, tzinfo=dt.timezone.utc)


def alert(n: int, event: str = "opened", severity: str = "critical", minutes: int = 0) -> dict:
    return {"id": f"a{n:03d}", "detector": "port_scan", "subject": f"192.0.2.{n}", "state": "open",
            "severity": severity, "started": T0, "updated": T0 + dt.timedelta(minutes=minutes),
            "ended": T0 + dt.timedelta(minutes=minutes) if event == "resolved" else None,
            "summary": f"192.0.2.{n} probed 340 hosts on 22/tcp", "event": event}


def private_cfg(home: Path, **notify):
    from flowlake.base import config

    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWLAKE_NOTIFY_")}
    env["FLOWLAKE_HOME"] = str(home)
    env.update({f"FLOWLAKE_NOTIFY_{k.upper()}": str(v) for k, v in notify.items()})
    return config.load(env=env), env


class Receiver:
    def __init__(self, tmp: Path, port: int | None = None, drop_answers: int = 0):
        self.port = port or free_port()
        self.log = tmp / f"receiver-{self.port}.jsonl"
        secret = tmp / "receiver.secret"
        secret.write_text(SECRET)
        self.proc = subprocess.Popen([sys.executable, str(RECEIVER), "--port", str(self.port), "--secret-file",
                                      str(secret), "--log", str(self.log), "--drop-answers", str(drop_answers)])
        wait_until(lambda: port_open("127.0.0.1", self.port), 30, "the webhook receiver")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/flowlake"

    def entries(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def accepted(self) -> list[dict]:
        return [json.loads(e["body"]) for e in self.entries() if e["verdict"].startswith("accepted")]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def receiver(tmp_path):
    r = Receiver(tmp_path)
    yield r
    r.stop()


def test_alert_contract_and_backoff():
    from flowlake.pipelines.alerts import notify as n

    a = n.normalise(alert(1, "resolved", minutes=5))
    assert a["updated"] == "2026-11-25T03:05:00Z" and a["ended"] == "2026-11-25T03:05:00Z" and a["started"] == "2026-11-25T03:00:00Z"
    assert n.idempotency_key(a) == "a001:resolved:2026-11-25T03:05:00Z"
    assert n.normalise({**alert(1), "updated": dt.datetime(2026, 11, 25, 3)})["updated"] == "2026-11-25T03:00:00Z"  # naive = UTC
    with pytest.raises(ValueError, match="a001: missing summary"):
        n.normalise({k: v for k, v in alert(1).items() if k != "summary"})
    with pytest.raises(ValueError, match="event 'closed' is not one of opened, updated, resolved"):
        n.normalise({**alert(1), "event": "closed"})
    assert n.passes("critical", "warning") and not n.passes("info", "warning") and n.passes("info", "")
    assert n.passes("catastrophic", "critical")  # an unknown severity is never filtered away
    import random

    r, rng = n.Retry(max_attempts=10, backoff_seconds=1.0, backoff_max_seconds=8.0), random.Random(1)
    for attempt in range(1, 10):
        cap = min(8.0, 2 ** (attempt - 1))
        waits = [r.delay(attempt, rng) for _ in range(200)]
        assert all(cap / 2 <= w <= cap for w in waits) and len(set(waits)) == 200  # bounded, jittered


def test_config_errors_name_the_key(tmp_path):
    from flowlake.base.config import ConfigError
    from flowlake.pipelines.alerts.notify import build_notifier

    assert build_notifier(private_cfg(tmp_path)[0]) is None  # nothing configured
    with pytest.raises(ConfigError, match="webhook_url is set but there is no signing secret"):
        build_notifier(private_cfg(tmp_path, webhook_url="http://127.0.0.1:9/x")[0])
    with pytest.raises(ConfigError, match="webhook_url = 'ftp://x': not an http"):
        build_notifier(private_cfg(tmp_path, webhook_url="ftp://x", webhook_secret="s")[0])
    with pytest.raises(ConfigError, match="webhook_secret_file = 'nope.key': cannot read"):
        build_notifier(private_cfg(tmp_path, webhook_url="http://127.0.0.1:9/x", webhook_secret_file="nope.key")[0])
    with pytest.raises(ConfigError, match="smtp_host is set but smtp_to lists no recipient"):
        build_notifier(private_cfg(tmp_path, smtp_host="127.0.0.1")[0])
    with pytest.raises(ConfigError, match="AUTH would send the password in clear"):
        build_notifier(private_cfg(tmp_path, smtp_host="127.0.0.1", smtp_to="a@b", smtp_security="none",
                                   smtp_username="u")[0])
    with pytest.raises(ConfigError, match="smtp_min_severity = 'loud'"):
        build_notifier(private_cfg(tmp_path, smtp_host="127.0.0.1", smtp_to="a@b", smtp_min_severity="loud")[0])
    # `flowlake config` says a secret is set without printing it
    _, env = private_cfg(tmp_path, webhook_secret="hush-123", smtp_password="pw-456", smtp_to="a@b,c@d")
    res = subprocess.run([sys.executable, "-m", "flowlake.cli", "config"], capture_output=True, text=True, env=env, timeout=60)
    shown = json.loads(res.stdout)["notify"]
    assert shown["webhook_secret"] == shown["smtp_password"] == "(set, not shown)" and shown["smtp_to"] == ["a@b", "c@d"]
    assert "hush-123" not in res.stdout and "pw-456" not in res.stdout


def test_webhook_signed_json_and_forgeries_rejected(tmp_path, receiver):
    from flowlake.pipelines.alerts import notify as n
    from flowlake.pipelines.alerts.webhook import verify

    key = tmp_path / "hook.key"
    key.write_text(SECRET + "\n")  # from a file, as the config recommends
    cfg, _ = private_cfg(tmp_path, webhook_url=receiver.url, webhook_secret_file=str(key), webhook_min_severity="warning")
    notifier = n.build_notifier(cfg)
    sent = [alert(1), alert(1, "updated", minutes=2), alert(2, severity="info"), alert(1, "resolved", minutes=9),
            alert(3, severity="warning")]
    for a in sent:
        notifier.submit(a)
    stats = notifier.close(timeout=60)["webhook"]
    assert (stats["sent"], stats["failed"], stats["filtered"], stats["dropped"]) == (4, 0, 1, 0), stats
    want = [n.normalise(a) for a in sent if a["severity"] != "info"]
    got = receiver.accepted()
    assert [g["alert"] for g in got] == want  # in order, every field as submitted
    assert [g["idempotency_key"] for g in got] == [n.idempotency_key(a) for a in want]
    assert {g["event"] for g in got} == {"opened", "updated", "resolved"}
    for e in receiver.entries():  # and flowlake's own verify() agrees with the receiver's check
        h = e["headers"]
        assert verify(SECRET.encode(), h["X-Flowlake-Timestamp"], e["body"].encode(), h["X-Flowlake-Signature"])
        assert h["Idempotency-Key"] == json.loads(e["body"])["idempotency_key"]
    assert json.loads(cfg.path("state", "notify.json").read_text())["channels"]["webhook"]["sent"] == 4

    # forgeries: a wrong key, a changed body, a replayed request with an old timestamp
    e = receiver.entries()[0]
    h, body = e["headers"], e["body"].encode()
    post = lambda hdrs, data: requests.post(receiver.url, data=data, headers=hdrs, timeout=10)  # noqa: E731
    from flowlake.pipelines.alerts.webhook import sign

    old = str(int(time.time()) - 3600)
    assert post({**h, "X-Flowlake-Signature": sign(b"other key", h["X-Flowlake-Timestamp"], body)}, body).status_code == 401
    assert post(h, body.replace(b"192.0.2.1", b"192.0.2.9")).status_code == 401
    assert post({**h, "X-Flowlake-Timestamp": old, "X-Flowlake-Signature": sign(SECRET.encode(), old, body)}, body).status_code == 401
    assert post(h, body).text == "duplicate"  # within tolerance: the idempotency key stops it
    assert [x["verdict"] for x in receiver.entries()[-4:]] == ["bad-signature", "bad-signature", "stale", "duplicate"]
    assert len(receiver.accepted()) == 4

    # a sender with the wrong secret: 401 is permanent, counted failed at once (no retries)
    cfg2, _ = private_cfg(tmp_path / "h2", webhook_url=receiver.url, webhook_secret="not the receiver's")
    notifier = n.build_notifier(cfg2)
    notifier.submit(alert(7))
    st = notifier.close(timeout=60)["webhook"]
    assert (st["sent"], st["failed"], st["retries"]) == (0, 1, 0) and "HTTP 401" in st["last_error"]


def test_webhook_receiver_down_then_back_nothing_blocks(tmp_path):
    from flowlake.pipelines.alerts import notify as n

    port = free_port()  # nothing listens yet
    cfg, env = private_cfg(tmp_path, webhook_url=f"http://127.0.0.1:{port}/hook", webhook_secret=SECRET,
                           queue_size=4, max_attempts=2000, backoff_seconds=0.1, backoff_max_seconds=0.5)
    notifier = n.build_notifier(cfg)
    alerts = [alert(i) for i in range(10)]
    submitted = threading.Event()

    def submit_all():
        for a in alerts:
            notifier.submit(a)
        submitted.set()

    t = threading.Thread(target=submit_all, daemon=True)
    t.start()
    # the receiver starts only after every submit has returned: a submit that waited for
    # delivery would never return and this fails (instead of hanging) after 60 s
    assert submitted.wait(60), "submit() blocked while the receiver was down"
    wait_until(lambda: notifier.stats()["webhook"]["retries"] >= 3, 60, "retries against the dead receiver")
    st = notifier.stats()["webhook"]
    assert st["sent"] == 0 and st["retrying"] == 1 and "Connection refused" in st["last_error"]
    assert st["dropped"] >= 5 and st["queued"] <= 4  # bounded: 10 alerts, a queue of 4 (+1 in flight)
    wait_until(lambda: json.loads(cfg.path("state", "notify.json").read_text())["channels"]["webhook"]["retries"] >= 1,
               30, "the state file to show the retries")
    res = subprocess.run([sys.executable, "-m", "flowlake.cli", "status", "--json"], capture_output=True, text=True,
                         env={**env, "FLOWLAKE_KAFKA_PORT": "1"}, timeout=120)
    assert res.returncode == 0, res.stderr
    shown = json.loads(res.stdout)["notify"]
    assert shown["configured"] == {"webhook": f"http://127.0.0.1:{port}/hook"}
    assert shown["channels"]["webhook"]["dropped"] >= 5 and shown["channels"]["webhook"]["sent"] == 0

    # it comes back, losing its first answer: the retry is de-duplicated by the receiver
    receiver = Receiver(tmp_path, port=port, drop_answers=1)
    try:
        st = notifier.close(timeout=120)["webhook"]
        entries = receiver.entries()
    finally:
        receiver.stop()
    got = [b["alert"]["id"] for b in receiver.accepted()]
    assert st["failed"] == 0 and st["sent"] + st["dropped"] == 10 and st["sent"] == len(got) >= 4
    assert len(set(got)) == len(got) and got == sorted(got)  # once each, in order
    assert set(got) >= {a["id"] for a in alerts[-4:]}  # the newest survive a full queue
    verdicts = [e["verdict"] for e in entries]
    assert verdicts.count("accepted-answer-lost") == 1 and verdicts.count("duplicate") == 1
    table = subprocess.run([sys.executable, "-m", "flowlake.cli", "status"], capture_output=True, text=True,
                           env={**env, "FLOWLAKE_KAFKA_PORT": "1", "COLUMNS": "200"}, timeout=120)
    assert "notifications" in table.stdout and f"WARNING: notifications via webhook: 0 failed, {st['dropped']} dropped" in table.stdout


# ---- e-mail ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smtp(tmp_path_factory):
    """A real SMTP server on a free port: STARTTLS required (a certificate made for this test
    by a private CA), AUTH required after it."""
    from services.smtp import SmtpServer, tls_files

    ca, chain = tls_files(tmp_path_factory.mktemp("smtp-tls"))
    port = free_port()
    with SmtpServer(port, chain, users={"flowlake": "mail-pw"}) as server:
        server.port, server.ca = port, ca
        yield server


def smtp_cfg(home: Path, smtp, **over):
    return private_cfg(home, **{"smtp_host": "127.0.0.1", "smtp_port": smtp.port, "smtp_to": "noc@example.org,sec@example.org",
                                "smtp_from": "flowlake@example.org", "smtp_username": "flowlake", "smtp_password": "mail-pw",
                                "smtp_cafile": str(smtp.ca), "smtp_min_severity": "warning", **over})


@pytest.mark.integration
def test_email_over_starttls_with_auth(tmp_path, smtp):
    from flowlake.pipelines.alerts import notify as n

    before = len(smtp.messages)
    pw = tmp_path / "smtp.pw"
    pw.write_text("mail-pw\n")
    cfg, _ = smtp_cfg(tmp_path, smtp, smtp_password="", smtp_password_file=str(pw))  # the password from a file
    notifier = n.build_notifier(cfg)
    notifier.submit(alert(5, severity="info"))  # below smtp_min_severity = warning
    notifier.submit(alert(5, "resolved", severity="critical", minutes=12))
    st = notifier.close(timeout=60)["email"]
    assert (st["sent"], st["failed"], st["filtered"]) == (1, 0, 1), st
    (m,) = smtp.wait_messages(before + 1)[before:]
    assert m["tls"] and m["login"] == "flowlake"
    assert m["mail_from"] == "flowlake@example.org" and m["rcpt_tos"] == ["noc@example.org", "sec@example.org"]
    msg = m["message"]
    assert msg["Subject"] == "[flowlake] CRITICAL resolved: port_scan 192.0.2.5"
    assert msg["To"] == "noc@example.org, sec@example.org"
    assert msg["X-Flowlake-Idempotency-Key"] == "a005:resolved:2026-11-25T03:12:00Z"
    body = msg.get_content().replace("\r\n", "\n")  # SMTP carries CRLF lines
    assert body.startswith("192.0.2.5 probed 340 hosts on 22/tcp\n")
    for line in ("detector  port_scan", "subject   192.0.2.5", "ended     2026-11-25T03:12:00Z", "id        a005"):
        assert line in body, body
    assert ("flowlake", True) in smtp.auth_attempts


@pytest.mark.parametrize("over,error", [
    ({"smtp_password": "wrong"}, "AUTH as 'flowlake' refused: 535"),
    ({"smtp_cafile": ""}, "certificate does not verify"),  # the private CA is not the system's
])
@pytest.mark.integration
def test_email_permanent_failures_are_counted_not_retried(tmp_path, smtp, over, error):
    from flowlake.pipelines.alerts import notify as n

    before = len(smtp.messages)
    notifier = n.build_notifier(smtp_cfg(tmp_path, smtp, **over)[0])
    notifier.submit(alert(6))
    st = notifier.close(timeout=60)["email"]
    assert (st["sent"], st["failed"], st["retries"]) == (0, 1, 0) and error in st["last_error"], st
    assert len(smtp.messages) == before


@pytest.mark.integration
def test_notify_test_command_reports_each_channel(tmp_path, smtp, receiver):
    _, env = smtp_cfg(tmp_path, smtp, webhook_url=receiver.url, webhook_secret=SECRET, smtp_min_severity="critical")
    before = len(smtp.messages)
    cmd = [sys.executable, "-m", "flowlake.cli", "notify", "test"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"webhook: sent to {receiver.url}" in res.stdout and "email: sent to noc@example.org" in res.stdout
    (hook,) = receiver.accepted()
    (m,) = smtp.wait_messages(before + 1)[before:]
    assert hook["alert"]["detector"] == "notify_test" and hook["alert"]["test"] is True
    assert m["message"]["X-Flowlake-Idempotency-Key"].strip() == hook["idempotency_key"]  # the same test alert (a long header is folded)

    # the webhook down, the e-mail password wrong: both reported, exit status 1
    receiver.stop()
    bad = {**env, "FLOWLAKE_NOTIFY_SMTP_PASSWORD": "wrong"}
    res = subprocess.run([*cmd, "--json"], capture_output=True, text=True, env=bad, timeout=120)
    assert res.returncode == 1
    out = json.loads(res.stdout)["channels"]
    assert not out["webhook"]["ok"] and "Connection refused" in out["webhook"]["error"]
    assert not out["email"]["ok"] and "AUTH as 'flowlake' refused" in out["email"]["error"]
    st = subprocess.run([sys.executable, "-m", "flowlake.cli", "status", "--json"], capture_output=True, text=True,
                        env={**env, "FLOWLAKE_KAFKA_PORT": "1"}, timeout=120)
    assert json.loads(st.stdout)["notify"]["last_test"]["channels"] == out
    nothing = {k: v for k, v in env.items() if not k.startswith("FLOWLAKE_NOTIFY_")}
    res = subprocess.run(cmd, capture_output=True, text=True, env=nothing, timeout=120)
    assert res.returncode == 2 and "no notification channel is configured" in res.stderr


def test_counters_that_cannot_be_written_do_not_stop_delivery(tmp_path, receiver):
    from flowlake.pipelines.alerts.notify import Notifier
    from flowlake.pipelines.alerts.webhook import Webhook

    blocker = tmp_path / "state"
    blocker.write_text("a file where the state folder should be")
    notifier = Notifier([Webhook(receiver.url, SECRET.encode())], state_file=blocker / "notify.json")
    notifier.submit(alert(8))
    notifier.submit(alert(9))  # the sender tried to write its counters after the first: it must live on
    assert notifier.close(timeout=60)["webhook"]["sent"] == 2
    with pytest.raises(RuntimeError, match="after close"):
        notifier.submit(alert(10))
    assert [a["alert"]["id"] for a in receiver.accepted()] == ["a008", "a009"]
