"""E-mail channel: one message per alert event over SMTP (stdlib smtplib), STARTTLS then AUTH.

The subject says what happened at a glance ("[flowlake] CRITICAL opened: port_scan 192.0.2.7"),
the body lists every field. The Message-ID derives from the idempotency key, so a retry after a
lost answer carries the same Message-ID and mail systems that de-duplicate drop it.
Transient (retried): connection errors, timeouts, 4xx replies. Permanent: 5xx replies, failed
AUTH, refused recipients, a server without STARTTLS, a certificate that does not verify.
"""
from __future__ import annotations

import email.utils
import hashlib
import smtplib
import socket
import ssl
from email.message import EmailMessage

from .delivery import Permanent, Transient, idempotency_key

_ORDER = ("summary", "detector", "subject", "severity", "state", "event", "started", "updated", "ended", "id")


def subject_line(alert: dict) -> str:
    line = f"[flowlake] {str(alert['severity']).upper()} {alert['event']}: {alert['detector']} {alert['subject']}"
    return line if len(line) <= 150 else line[:147] + "..."


def body_text(alert: dict) -> str:
    width = max(len(k) for k in _ORDER)
    lines = [str(alert.get("summary") or ""), ""]
    lines += [f"{k.ljust(width)}  {'-' if alert.get(k) is None else alert[k]}" for k in _ORDER[1:]]
    extra = sorted(set(alert) - set(_ORDER))
    lines += [f"{k.ljust(width)}  {alert[k]}" for k in extra]
    lines += ["", f"flowlake alerts show {alert['id']}    (details; `flowlake alerts ack` to acknowledge)"]
    return "\n".join(lines) + "\n"


def message(alert: dict, sender: str, to: list[str]) -> EmailMessage:
    msg = EmailMessage()
    msg["Subject"] = subject_line(alert)
    msg["From"] = sender
    msg["To"] = ", ".join(to)
    msg["Date"] = email.utils.formatdate(localtime=False, usegmt=True)
    key = idempotency_key(alert)
    domain = sender.rpartition("@")[2] or "flowlake"
    msg["Message-ID"] = f"<{hashlib.sha256(key.encode()).hexdigest()[:32]}@{domain}>"
    msg["X-Flowlake-Idempotency-Key"] = key
    msg.set_content(body_text(alert))
    return msg


class Email:
    name = "email"

    def __init__(self, host: str, port: int, sender: str, to: list[str], security: str = "starttls",
                 username: str = "", password: str = "", cafile: str = "", timeout: float = 10.0,
                 min_severity: str = ""):
        self.host, self.port, self.sender, self.to = host, port, sender, to
        self.security, self.username, self.password = security, username, password
        self.cafile, self.timeout, self.min_severity = cafile, timeout, min_severity
        self.target = f"{', '.join(to)} via {host}:{port} ({security}{', auth' if username else ''})"

    def _context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.cafile or None)

    def send(self, alert: dict) -> None:
        where = f"SMTP {self.host}:{self.port}"
        try:
            with smtplib.SMTP(self.host, self.port, timeout=self.timeout) as smtp:
                smtp.ehlo()
                if self.security == "starttls":
                    if not smtp.has_extn("starttls"):
                        raise Permanent(f"{where}: the server does not offer STARTTLS (smtp_security = \"starttls\")")
                    smtp.starttls(context=self._context())
                    smtp.ehlo()
                if self.username:
                    smtp.login(self.username, self.password)
                smtp.send_message(message(alert, self.sender, self.to))
        except Permanent:
            raise
        except smtplib.SMTPAuthenticationError as exc:
            raise Permanent(f"{where}: AUTH as {self.username!r} refused: {exc.smtp_code} {_text(exc.smtp_error)}") from None
        except smtplib.SMTPRecipientsRefused as exc:
            refused = "; ".join(f"{r}: {c} {_text(m)}" for r, (c, m) in exc.recipients.items())
            raise Permanent(f"{where}: recipients refused: {refused}") from None
        except smtplib.SMTPResponseException as exc:
            what = f"{where}: {exc.smtp_code} {_text(exc.smtp_error)}"
            raise (Transient(what) if 400 <= exc.smtp_code < 500 else Permanent(what)) from None
        except ssl.SSLCertVerificationError as exc:
            raise Permanent(f"{where}: the server's certificate does not verify ({exc.verify_message}); "
                            f"set smtp_cafile to its CA") from None
        except (smtplib.SMTPServerDisconnected, smtplib.SMTPConnectError, socket.timeout, OSError) as exc:
            raise Transient(f"{where}: {type(exc).__name__}: {exc}") from None
        except smtplib.SMTPException as exc:
            raise Permanent(f"{where}: {type(exc).__name__}: {exc}") from None


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
