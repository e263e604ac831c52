"""Carry a lab's NetFlow out of its namespace: receive on 127.0.0.1:PORT inside the
namespace, send from a loopback address of the host's own namespace to the stack's nfcapd.

A socket keeps the namespace it was created in: this process opens the sending socket
first, then enters the lab namespace (setns) and opens the receiving one. nfcapd sees the
datagrams arrive from --source, an address of 127.0.0.0/8 unique to this lab, which is
how the ingest tells this lab's flows from every other exporter's.

    python -m flowlake.collectors.lab.relay --netns NS --port 9995 --to 127.0.0.1:2055 --source 127.88.1.2
"""
from __future__ import annotations

import argparse
import ctypes
import os
import socket
import sys

CLONE_NEWNET = 0x40000000


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="flowlake-lab-relay")
    ap.add_argument("--netns", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--to", required=True)
    ap.add_argument("--source", required=True)
    args = ap.parse_args(argv)
    host, port = args.to.rsplit(":", 1)
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out.bind((args.source, 0))
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{args.netns}", os.O_RDONLY)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise SystemExit(f"setns {args.netns}: {os.strerror(ctypes.get_errno())}")
    os.close(fd)
    inp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    inp.bind(("127.0.0.1", args.port))
    print("ready", flush=True)
    while True:
        data = inp.recv(65535)
        out.sendto(data, (host, int(port)))


if __name__ == "__main__":
    sys.exit(main())
