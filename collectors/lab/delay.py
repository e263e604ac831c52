"""A fixed one-way delay for a lab path, without netem (this kernel has neither netem nor
fq, so neither `tc ... netem delay` nor EDT pacing of skb->tstamp can hold a packet).

The kernel holds the packets, we only time them: an iptables NFQUEUE rule in the
receiving namespace queues what arrives on the path's device (nfnetlink_queue, built in
here), this process is told each packet's id (metadata only, no payload copied) and gives
the verdict ACCEPT once the packet is `delay_ms` old. The delay is a FIFO, so one batch
verdict ("every id up to N") releases all packets that are due, and a notification lost to
a full socket buffer can never strand a packet. GSO packets are queued whole (no
segmentation). The queue is bounded ([lab] delay_queue_packets): past it the kernel
drops, as a full netem queue would.

    ip netns exec NS python -m flowlake.collectors.lab.delay --queue 1:20 --queue 2:35

prints "ready" once bound; one process per namespace serves all its paths' queues
(queue number:delay in ms). Netlink messages are packed here with struct: the layouts are
the kernel's uapi (linux/netfilter/nfnetlink_queue.h), a few fixed structs.
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import errno
import os
import select
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
SO_RCVBUFFORCE = 33  # not exported by Python's socket module
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 2, 3
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_GSO = 4
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NF_ACCEPT = 1


def _attr(kind: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * (-n % 4)


def _msg(msg: int, queue: int, attrs: bytes, flags: int = NLM_F_REQUEST, seq: int = 0) -> bytes:
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg, flags, seq, 0) + body


def _attrs(buf: bytes, off: int, end: int):
    while off + 4 <= end:
        n, kind = struct.unpack_from("=HH", buf, off)
        if n < 4:
            return
        yield kind & 0x3FFF, buf[off + 4:off + n]
        off += (n + 3) & ~3


class DelayLine:
    def __init__(self, delays_ms: dict[int, float], maxlen: int):
        self.delays = {q: d / 1000.0 for q, d in delays_ms.items()}
        self.pending = {q: collections.deque() for q in delays_ms}   # (due, packet id), in arrival order
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.bind((0, 0))
        for opt in (SO_RCVBUFFORCE, socket.SO_RCVBUF):  # FORCE needs CAP_NET_ADMIN (we are root)
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, 8 << 20)
                break
            except OSError:
                continue
        self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
        self.seq = 0
        for q in delays_ms:
            self._config(q, _attr(NFQA_CFG_CMD, struct.pack("=BBH", NFQNL_CFG_CMD_BIND, 0, 0)))
            self._config(q, _attr(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META))
                         + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", maxlen))
                         + _attr(NFQA_CFG_MASK, struct.pack(">I", NFQA_CFG_F_GSO))
                         + _attr(NFQA_CFG_FLAGS, struct.pack(">I", NFQA_CFG_F_GSO)))
        self.sock.setblocking(False)
        self.released = 0

    def _config(self, queue: int, attrs: bytes) -> None:
        """Send a config message and read its ack: a refusal (say, the queue is bound by
        another process) is an error naming the queue, not a silent no-delay."""
        self.seq += 1
        self.sock.send(_msg(NFQNL_MSG_CONFIG, queue, attrs, NLM_F_REQUEST | NLM_F_ACK, self.seq))
        while True:
            buf = self.sock.recv(65536)
            n, kind, _, seq, _ = struct.unpack_from("=IHHII", buf, 0)
            if kind == NLMSG_ERROR and seq == self.seq:
                code = -struct.unpack_from("=i", buf, 16)[0]
                if code:
                    raise SystemExit(f"nfqueue {queue}: binding refused: {os.strerror(code)}")
                return

    def _receive(self, now: float) -> None:
        while True:
            try:
                buf = self.sock.recv(1 << 20)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:  # a lost notice: the batch verdict still releases it
                    continue
                raise
            off = 0
            while off + 16 <= len(buf):
                n, kind, _, _, _ = struct.unpack_from("=IHHII", buf, off)
                if n < 16:
                    break
                if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                    queue = socket.ntohs(struct.unpack_from("=H", buf, off + 18)[0])
                    for a, payload in _attrs(buf, off + 20, off + n):
                        if a == NFQA_PACKET_HDR and queue in self.pending:
                            self.pending[queue].append((now + self.delays[queue],
                                                        struct.unpack_from(">I", payload)[0]))
                off += (n + 3) & ~3

    def _release(self, now: float) -> None:
        for queue, line in self.pending.items():
            last = None
            while line and line[0][0] <= now:
                last = line.popleft()[1]
                self.released += 1
            if last is not None:
                self.sock.send(_msg(NFQNL_MSG_VERDICT_BATCH, queue,
                                    _attr(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, last))))

    def next_due(self) -> float | None:
        heads = [line[0][0] for line in self.pending.values() if line]
        return min(heads) if heads else None

    def serve(self) -> None:
        while True:
            due = self.next_due()
            timeout = None if due is None else max(0.0, due - time.monotonic())
            ready, _, _ = select.select([self.sock], [], [], timeout)
            now = time.monotonic()
            if ready:
                self._receive(now)
            self._release(time.monotonic())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="flowlake-lab-delay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--queue", action="append", required=True, metavar="NUM:MS",
                    help="an NFQUEUE number and the delay in ms its packets get (repeatable)")
    ap.add_argument("--maxlen", type=int, default=10000, help="packets a queue may hold (the kernel drops past it)")
    ap.add_argument("--rt-priority", type=int, default=10, help="SCHED_FIFO priority (precision under load)")
    args = ap.parse_args(argv)
    delays = {}
    for q in args.queue:
        num, _, ms = q.partition(":")
        try:
            delays[int(num)] = float(ms)
        except ValueError:
            ap.error(f"--queue {q!r}: expected NUM:MS such as 1:20")
    try:  # a lab killed with SIGKILL takes its delay lines with it (they hold real-time priority)
        ctypes.CDLL(None, use_errno=True).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM
    except (OSError, AttributeError):
        pass
    line = DelayLine(delays, args.maxlen)
    try:  # netem times packets in softirq; a delay line descheduled by a busy box adds its wait to every packet
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(args.rt_priority))
    except (OSError, AttributeError):
        pass  # not root or no RT scheduling: still correct, only less precise under load
    print("ready", flush=True)
    try:
        line.serve()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
