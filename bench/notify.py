"""What a notification costs the detector that submits it, against references in the same process.

    .venv/bin/python bench/notify.py [--n 20000]

Prints the time of one `Notifier.submit()` with the webhook receiver down (every try refused,
the queue full and dropping) and up (tests/webhook_receiver.py in its own process), as a ratio
to a bare reference: `json.dumps` of the same alert, the least any sender must do. Then the
delivery rate to the live receiver (signed POSTs per second, one sender thread).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flowlake.base.ports import free_port
from flowlake.base.process import port_open, wait_until
from flowlake.pipelines.alerts.notify import Notifier, Retry
from flowlake.pipelines.alerts.webhook import Webhook

RECEIVER = Path(__file__).resolve().parent.parent / "tests" / "webhook_receiver.py"
SECRET = b"bench-secret"


def alerts(n: int) -> list[dict]:
    t = dt.datetime(2026, 11, 25, tzinfo=dt.timezone.utc)
    return [{"id": f"b{i}", "detector": "port_scan", "subject": "192.0.2.7", "state": "open", "severity": "warning",
             "started": t, "updated": t + dt.timedelta(seconds=i), "ended": None, "event": "updated",
             "summary": "192.0.2.7 probed 340 hosts on 22/tcp"} for i in range(n)]


def per_call(fn, items) -> float:
    t0 = time.perf_counter()
    for a in items:
        fn(a)
    return (time.perf_counter() - t0) / len(items)


def main() -> None:
    import logging

    logging.getLogger("flowlake.notify").setLevel(logging.CRITICAL)  # the dead receiver would log every drop
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    args = ap.parse_args()
    items = alerts(args.n)
    ref = per_call(lambda a: json.dumps(a, default=str), items)
    print(f"reference json.dumps of an alert: {ref * 1e6:.1f} us")

    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    down = Notifier([Webhook(url, SECRET)], queue_size=1000, retry=Retry(10**6, 0.05, 0.2))
    t = per_call(down.submit, items)
    st = down.close(timeout=0)["webhook"]
    print(f"submit, receiver down:  {t * 1e6:.1f} us ({t / ref:.1f}x reference); "
          f"{st['dropped']} of {args.n} dropped (full queue, then left at close), {st['retries']} retries meanwhile")

    with tempfile.TemporaryDirectory() as tmp:
        secret = Path(tmp) / "s"
        secret.write_bytes(SECRET)
        proc = subprocess.Popen([sys.executable, str(RECEIVER), "--port", str(port), "--secret-file", str(secret),
                                 "--log", str(Path(tmp) / "log.jsonl")])
        try:
            wait_until(lambda: port_open("127.0.0.1", port), 30, "the receiver")
            n = min(args.n, 2000)
            up = Notifier([Webhook(url, SECRET)], queue_size=n, retry=Retry(5, 0.05, 0.2))
            t = per_call(up.submit, items[:n])
            t0 = time.perf_counter()
            st = up.close(timeout=600)["webhook"]
            took = time.perf_counter() - t0
            print(f"submit, receiver up:    {t * 1e6:.1f} us ({t / ref:.1f}x reference)")
            print(f"delivery: {st['sent']} signed POSTs in {took:.1f} s after the last submit, "
                  f"{st['sent'] / took:.0f}/s, one sender thread")
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
