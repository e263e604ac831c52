"""Active-result parsing speed, against references in the same process.

    .venv/bin/python bench/active_parse.py [--n 2000]

Prints records/s for the ping and iperf3 parsers and the ratio to a bare reference
(ping: one regex pass over the same text; iperf3: json.loads of the same document), so
the parser's own overhead is visible apart from the machine's speed.
"""
from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from flowlake.collectors.active.parsers import iperf3, ping

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "active"


def ping_text(replies: int = 30) -> str:
    lines = ["PING 192.0.2.1 (192.0.2.1) 56(84) bytes of data."]
    for i in range(1, replies + 1):
        lines.append(f"[{1795295766 + i}.{i:06d}] 64 bytes from 192.0.2.1: icmp_seq={i} ttl=64 time={10 + i % 7}.{i:03d} ms")
    lines += ["", "--- 192.0.2.1 ping statistics ---",
              f"{replies} packets transmitted, {replies} received, 0% packet loss, time {replies * 1000}ms"]
    return "\n".join(lines) + "\n"


def rate(fn, n) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return n / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    n = ap.parse_args().n
    text = ping_text()
    reply = re.compile(r"icmp_seq=(\d+) ttl=\d+ time=([\d.]+) ms")
    ours = rate(lambda: ping.parse_ping("bench", text), n)
    ref = rate(lambda: reply.findall(text), n)
    print(f"ping (30 replies): {ours:,.0f} runs/s; bare regex pass {ref:,.0f}/s; ratio {ours / ref:.2f}")
    doc = (DATA / "iperf3_tcp.json").read_text()
    import json
    ours = rate(lambda: iperf3.parse("bench", doc), n)
    ref = rate(lambda: json.loads(doc), n)
    print(f"iperf3 -J (2 streams): {ours:,.0f} docs/s; json.loads alone {ref:,.0f}/s; ratio {ours / ref:.2f}")


if __name__ == "__main__":
    main()
