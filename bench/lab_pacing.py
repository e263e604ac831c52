"""How precisely the lab's paced endpoint (collectors/lab/endpoint.py) holds its rate:
a frame every 1/rate s over UDP on loopback, for a few rates; prints per rate the achieved
rate and the send lateness (sent - due) p50/p99/max. No namespaces, no root.

    .venv/bin/python bench/lab_pacing.py [--seconds 3]
"""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flowlake.base.ports import free_port
from flowlake.collectors.lab import metrics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lab-pacing-"))
    ep = [sys.executable, "-m", "flowlake.collectors.lab.endpoint"]
    print(f"{'rate/s':>8} {'achieved':>9} {'late p50 ms':>12} {'late p99 ms':>12} {'late max ms':>12} {'recv p99 ms':>12}")
    for rate in (100, 500, 1000, 2000, 5000):
        port = free_port(socket.SOCK_DGRAM)
        srv = subprocess.Popen([*ep, "server", "--proto", "udp", "--bind", "127.0.0.1", "--port", str(port),
                                "--out", str(tmp / "s.json")], stdout=subprocess.PIPE, text=True)
        srv.stdout.readline()
        subprocess.run([*ep, "paced", "--proto", "udp", "--to", "127.0.0.1", "--port", str(port), "--rate",
                        str(rate), "--frame-size", "200", "--duration", str(args.seconds), "--out",
                        str(tmp / "c.json")], check=True)
        time.sleep(0.2)
        srv.terminate()
        srv.wait()
        client = json.loads((tmp / "c.json").read_text())
        server = json.loads((tmp / "s.json").read_text())
        late = [(sent - due) * 1000 for _, due, sent in client["sent"]]
        m = metrics.paced(client, server, 1000 / rate)
        print(f"{rate:>8} {m['achieved_rate']:>9.1f} {metrics.quantile(late, 0.5):>12.3f} "
              f"{metrics.quantile(late, 0.99):>12.3f} {max(late):>12.3f} {m['latency_p99']:>12.3f}")


if __name__ == "__main__":
    main()
