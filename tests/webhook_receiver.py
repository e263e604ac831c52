"""A webhook receiver as an operator would write one, run as its own process by the tests:

    python tests/webhook_receiver.py --port P --secret-file F --log LOG [--drop-answers N]

It checks each POST the way README "Notifications" tells receivers to (written here from that
text, not with flowlake's code): HMAC-SHA256 over timestamp + "." + raw body, constant-time
comparison, timestamp within --tolerance seconds; 401 otherwise. It de-duplicates by the
Idempotency-Key header: a key seen before is answered 200 and not processed again.
--drop-answers N: for the first N new notifications, process them and then close the
connection without answering (a lost answer), so the sender retries and the receiver sees
a duplicate. Every request is logged as one JSON line: verdict, headers, body.
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--secret-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--tolerance", type=float, default=300)
    ap.add_argument("--drop-answers", type=int, default=0)
    args = ap.parse_args()
    secret = open(args.secret_file, "rb").read().strip()
    lock = threading.Lock()
    seen: set[str] = set()
    state = {"drop": args.drop_answers}
    log = open(args.log, "a", buffering=1)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet
            pass

        def record(self, verdict: str, body: bytes) -> None:
            log.write(json.dumps({"verdict": verdict, "path": self.path, "headers": dict(self.headers),
                                  "body": body.decode("utf-8", "replace")}) + "\n")

        def answer(self, code: int, text: str) -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            ts = self.headers.get("X-Flowlake-Timestamp", "")
            got = self.headers.get("X-Flowlake-Signature", "")
            want = "sha256=" + hmac.new(secret, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
            with lock:
                if not hmac.compare_digest(want, got):
                    self.record("bad-signature", body)
                    return self.answer(401, "bad signature")
                if not ts.isdigit() or abs(time.time() - int(ts)) > args.tolerance:
                    self.record("stale", body)
                    return self.answer(401, "stale timestamp")
                key = self.headers.get("Idempotency-Key", "")
                if key in seen:
                    self.record("duplicate", body)
                    return self.answer(200, "duplicate")
                seen.add(key)
                if state["drop"] > 0:
                    state["drop"] -= 1
                    self.record("accepted-answer-lost", body)
                    self.close_connection = True
                    return  # no answer at all: the sender cannot know it arrived
                self.record("accepted", body)
            self.answer(200, "ok")

    ThreadingHTTPServer.allow_reuse_address = True
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.serve_forever()


if __name__ == "__main__":
    main()
