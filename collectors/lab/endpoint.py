"""The lab's own traffic endpoints: paced invocations, message probes, two-path splits
and a plain bulk sender, over TCP, UDP, MPTCP or SCTP sockets.

    python -m flowlake.collectors.lab.endpoint server --proto tcp --bind 10.1.1.2 --port 7000 --out s.json
    python -m flowlake.collectors.lab.endpoint paced --proto udp --to 10.1.1.2 --port 7000 \\
        --rate 100 --frame-size 200 --duration 5 --out c.json

Every frame carries its sequence number, the time it was due and the time it left
(CLOCK_MONOTONIC: one clock for every namespace of the host, so one-way latency is exact);
the server stamps arrival. A paced client sends frame i at t0 + i/rate, sleeping until
about a millisecond before and spinning the rest (perf_counter pacing holds a few
thousand frames per second here; the lab's specs stay far below). A frame that cannot
leave at its time leaves as soon as it can, late: that is what a real-time application
sees and what `missed_deadlines` counts. Results are JSON files the runner reads.
"""
from __future__ import annotations

import argparse
import json
import signal
import socket
import struct
import sys
import threading
import time

IPPROTO_MPTCP = 262
IPPROTO_SCTP = 132
# kind (F frame, M message wanting an ack, B bulk), seq, due, sent, payload length
HEADER = struct.Struct("!cIddI")
now = time.perf_counter  # CLOCK_MONOTONIC on Linux: shared by every process and namespace


def make_socket(proto: str, cc: str = "") -> socket.socket:
    if proto == "udp":
        return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    number = {"tcp": socket.IPPROTO_TCP, "mptcp": IPPROTO_MPTCP, "sctp": IPPROTO_SCTP}[proto]
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, number)
    if proto in ("tcp", "mptcp"):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if cc:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    return s


def unsupported(proto: str) -> str | None:
    """Why this kernel cannot open `proto` sockets, or None if it can."""
    try:
        make_socket(proto).close()
    except OSError as exc:
        return f"{proto} sockets are not supported by this kernel ({exc.strerror}, errno {exc.errno})"
    return None


def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class Server:
    def __init__(self, proto: str, bind: str, port: int):
        self.proto = proto
        self.frames: list[tuple[int, float, float, float]] = []
        self.bytes = 0
        self.first = self.last = None
        self.lock = threading.Lock()
        self.sock = make_socket(proto)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if proto == "udp":
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((bind, port))
        if proto != "udp":
            self.sock.listen(16)

    def serve(self) -> None:
        if self.proto == "udp":
            while True:
                data = self.sock.recv(65535)
                t = now()
                kind, seq, due, sent, _ = HEADER.unpack_from(data)
                self._count(len(data), t)
                if kind == b"F":
                    self.frames.append((seq, due, sent, t))
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _count(self, n: int, t: float) -> None:
        with self.lock:
            self.bytes += n
            self.first = t if self.first is None else self.first
            self.last = t

    def _conn(self, conn: socket.socket) -> None:
        with conn:
            while True:
                head = _recv_exact(conn, HEADER.size)
                if head is None:
                    return
                kind, seq, due, sent, length = HEADER.unpack(head)
                if kind == b"B":  # bulk: count what arrives until the peer closes
                    self._count(HEADER.size, now())
                    while chunk := conn.recv(1 << 20):
                        self._count(len(chunk), now())
                    return
                if length and _recv_exact(conn, length) is None:
                    return
                t = now()
                self._count(HEADER.size + length, t)
                if kind == b"F":
                    with self.lock:
                        self.frames.append((seq, due, sent, t))
                elif kind == b"M":
                    conn.sendall(b"A")

    def result(self) -> dict:
        with self.lock:
            return {"frames": sorted(self.frames), "bytes": self.bytes, "first": self.first, "last": self.last}


def paced(args) -> dict:
    """Send a frame every 1/rate s for `duration` s; return what left when."""
    s = make_socket(args.proto, args.cc)
    s.connect((args.to, args.port))
    size = max(args.frame_size, HEADER.size)
    pad = b"\0" * (size - HEADER.size)
    n = int(round(args.duration * args.rate))
    period = 1.0 / args.rate
    sent, errors = [], 0
    t0 = now() + 0.05
    print("sending", flush=True)  # the runner starts a flapping link's clock here
    for i in range(n):
        due = t0 + i * period
        gap = due - now()
        if gap > 0.0015:
            time.sleep(gap - 0.001)
        while now() < due:
            pass
        t = now()
        try:
            if args.proto == "udp":
                s.send(HEADER.pack(b"F", i, due, t, 0) + pad)
            else:
                s.sendall(HEADER.pack(b"F", i, due, t, len(pad)) + pad)
            sent.append((i, due, t))
        except OSError:  # a link that is down: the frame is lost here
            errors += 1
    s.close()
    return {"scheduled": n, "rate": args.rate, "t0": t0, "sent": sent, "send_errors": errors}


def probe(args) -> dict:
    """Message probes: `count` messages of each size, each timed until the server's ack."""
    s = make_socket(args.proto, args.cc)
    s.connect((args.to, args.port))
    out = []
    for size in args.sizes:
        payload = b"\0" * size
        for _ in range(args.count):
            t = now()
            s.sendall(HEADER.pack(b"M", 0, t, t, size) + payload)
            if _recv_exact(s, 1) is None:
                raise SystemExit("server closed the connection")
            out.append((size, (now() - t) * 1000.0))
            time.sleep(args.gap)
    s.close()
    return {"probes": out}


def split(args) -> dict:
    """One message of `size` bytes split over paths (addr:bytes each), sent at once;
    its latency is until the last part is acknowledged."""
    parts = [(addr, int(n)) for addr, n in (p.rsplit(":", 1) for p in args.parts)]
    socks = []
    for addr, _ in parts:
        sk = make_socket(args.proto, args.cc)
        sk.connect((addr, args.port))
        socks.append(sk)
    out = []
    for _ in range(args.count):
        done = [0.0] * len(parts)
        t = now()

        def send(k):
            n = parts[k][1]
            if n > 0:
                socks[k].sendall(HEADER.pack(b"M", 0, t, t, n) + b"\0" * n)
                _recv_exact(socks[k], 1)
            done[k] = now()

        threads = [threading.Thread(target=send, args=(k,)) for k in range(len(parts))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        out.append((max(done) - t) * 1000.0)
        time.sleep(args.gap)
    for sk in socks:
        sk.close()
    return {"latencies_ms": out}


def bulk(args) -> dict:
    """Send as fast as the socket takes for `duration` s (MPTCP bulk: iperf3 3.12 has no --mptcp)."""
    s = make_socket(args.proto, args.cc)
    s.connect((args.to, args.port))
    chunk = b"\0" * (128 << 10)
    t0 = now()
    s.sendall(HEADER.pack(b"B", 0, t0, t0, 0))
    sent = 0
    while now() - t0 < args.duration:
        sent += s.send(chunk)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)  # the server closes after reading everything: the bytes have arrived
    return {"bytes": sent, "seconds": now() - t0}


def filler(dev: str, count: int) -> None:
    """Non-IP frames (IEEE local experimental ethertype 0x88B5) out of `dev`: softflowd
    ignores them (no flow), but they fill the capture ring's current block, which libpcap
    otherwise hands to softflowd only when full (a quiet link holds the last packets back)."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((dev, 0))
    frame = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + b"\x88\xb5" + b"\0" * 1400
    for _ in range(count):
        s.send(frame)
    s.close()


def main(argv=None) -> int:
    if argv is None and sys.argv[1:2] == ["filler"]:
        filler(sys.argv[2], int(sys.argv[3]))
        return 0
    ap = argparse.ArgumentParser(prog="flowlake-lab-endpoint")
    sub = ap.add_subparsers(dest="mode", required=True)
    sv = sub.add_parser("server")
    sv.add_argument("--proto", required=True)
    sv.add_argument("--bind", required=True)
    sv.add_argument("--port", type=int, required=True)
    sv.add_argument("--out", required=True)
    for name in ("paced", "probe", "split", "bulk"):
        p = sub.add_parser(name)
        p.add_argument("--proto", required=True)
        p.add_argument("--port", type=int, required=True)
        p.add_argument("--cc", default="")
        p.add_argument("--out", required=True)
        p.add_argument("--to", default="")
        p.add_argument("--duration", type=float, default=5.0)
        p.add_argument("--rate", type=float, default=100.0)
        p.add_argument("--frame-size", type=int, default=200)
        p.add_argument("--sizes", type=int, nargs="*", default=[])
        p.add_argument("--parts", nargs="*", default=[])
        p.add_argument("--count", type=int, default=5)
        p.add_argument("--gap", type=float, default=0.05)
    args = ap.parse_args(argv)
    if args.mode == "server":
        server = Server(args.proto, args.bind, args.port)

        def finish(*_):
            with open(args.out, "w") as fh:
                json.dump(server.result(), fh)
            sys.stdout.flush()
            raise SystemExit(0)

        signal.signal(signal.SIGTERM, finish)
        signal.signal(signal.SIGINT, finish)
        print("ready", flush=True)
        server.serve()
        return 0
    result = {"paced": paced, "probe": probe, "split": split, "bulk": bulk}[args.mode](args)
    with open(args.out, "w") as fh:
        json.dump(result, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
