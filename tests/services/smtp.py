"""A real SMTP server for tests and local trials (aiosmtpd): STARTTLS required, AUTH required
after it, every accepted message kept with how it arrived (TLS, login).

    with SmtpServer(port, cert_chain, users={"flowlake": "pw"}) as server:
        ...  # send to 127.0.0.1:port with STARTTLS and AUTH
        server.messages  # [{"mail_from", "rcpt_tos", "message" (email.message.Message), "tls", "login"}]

The server runs in a thread of the calling process; clients talk to it over TCP like to any MTA.
`tls_files(dir)` makes a private CA and a certificate for 127.0.0.1 (openssl, as the local
Kafka broker's) and returns (ca.pem, key+certificate PEM).
"""
from __future__ import annotations

import email
import email.policy
import logging
import ssl
import threading
from pathlib import Path


def tls_files(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    from flowlake.collectors.kafka import make_tls

    return make_tls(Path(directory), host)


class SmtpServer:
    def __init__(self, port: int, cert_chain: Path, users: dict[str, str], host: str = "127.0.0.1"):
        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import AuthResult, LoginPassword

        self.messages: list[dict] = []
        self.auth_attempts: list[tuple[str, bool]] = []
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        server = self

        class Handler:
            async def handle_DATA(self, smtp, session, envelope):
                msg = email.message_from_bytes(envelope.original_content or envelope.content,
                                               policy=email.policy.default)
                with server._arrived:
                    server.messages.append({"mail_from": envelope.mail_from, "rcpt_tos": list(envelope.rcpt_tos),
                                            "message": msg, "tls": session.ssl is not None,
                                            "login": session.auth_data.decode() if isinstance(session.auth_data, bytes)
                                            else session.auth_data})
                    server._arrived.notify_all()
                return "250 Message accepted for delivery"

        def authenticator(smtp, session, envelope, mechanism, auth_data):
            ok = (isinstance(auth_data, LoginPassword)
                  and users.get(auth_data.login.decode()) == auth_data.password.decode())
            with server._lock:
                server.auth_attempts.append((auth_data.login.decode() if isinstance(auth_data, LoginPassword) else "?", ok))
            return AuthResult(success=ok, handled=False, auth_data=auth_data.login if ok else None)

        # aiosmtpd's thread logs each session's INFO lines (EOF received, ...) also after
        # pytest closed the stream it captured: "--- Logging error ---" tracebacks in the
        # run's output. Its warnings and errors still log.
        logging.getLogger("mail.log").setLevel(logging.WARNING)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(cert_chain))
        self.controller = Controller(Handler(), hostname=host, port=port, tls_context=ctx, require_starttls=True,
                                     authenticator=authenticator, auth_required=True, auth_require_tls=True,
                                     server_hostname=host, ready_timeout=30)

    def wait_messages(self, n: int, timeout: float = 30.0) -> list[dict]:
        """Block until at least n messages arrived (or timeout); returns them."""
        with self._arrived:
            self._arrived.wait_for(lambda: len(self.messages) >= n, timeout)
            return list(self.messages)

    def __enter__(self) -> SmtpServer:
        self.controller.start()
        return self

    def __exit__(self, *exc) -> None:
        self.controller.stop()
