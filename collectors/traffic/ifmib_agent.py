"""A modelled router's IF-MIB for a real net-snmp agent: snmpd's pass_persist protocol.

snmpd runs this script (`pass_persist .1.3.6.1.2.1.2.2 PYTHON THIS STATE .1.3.6.1.2.1.2.2`,
and the same for ifXTable .1.3.6.1.2.1.31.1.1; its own interface modules switched off) and
asks it for the ifTable and ifXTable columns the poller reads; the values come from a JSON
state file the demo rewrites before each poll:

    {"interfaces": {"<ifIndex>": {"name", "alias", "speed_mbps", "oper_status",
                                  "counters": {"in_octets", "out_octets", ...}}}}

The file is read again whenever it changed, so each poll sees the counters of its moment.
Standard library only: snmpd starts it with the interpreter's path and the file's.

The protocol (snmpd.conf(5), "pass_persist"): PING -> PONG; get/getnext OID -> OID, type,
value (or NONE); set -> not-writable.
"""
from __future__ import annotations

import json
import os
import sys

IF_ENTRY = (1, 3, 6, 1, 2, 1, 2, 2, 1)
IFX_ENTRY = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1)
WRAP32 = 2 ** 32
WRAP64 = 2 ** 64


def columns(idx: int, i: dict) -> list[tuple[tuple, str, str]]:
    """(OID, pass type, value) of one interface."""
    c = i.get("counters") or {}
    bps = int(i.get("speed_mbps", 0)) * 1_000_000

    def c32(name):
        return "counter", str(int(c.get(name, 0)) % WRAP32)

    def c64(name):
        return "counter64", str(int(c.get(name, 0)) % WRAP64)

    rows = {
        IF_ENTRY + (1,): ("integer", str(idx)),                          # ifIndex
        IF_ENTRY + (2,): ("string", i.get("name", "")),                  # ifDescr
        IF_ENTRY + (3,): ("integer", "6"),                               # ifType ethernetCsmacd
        IF_ENTRY + (5,): ("gauge", str(min(bps, WRAP32 - 1))),           # ifSpeed
        IF_ENTRY + (7,): ("integer", "1"),                               # ifAdminStatus up
        IF_ENTRY + (8,): ("integer", str(int(i.get("oper_status", 1)))),  # ifOperStatus
        IF_ENTRY + (10,): c32("in_octets"), IF_ENTRY + (11,): c32("in_ucast_pkts"),
        IF_ENTRY + (13,): c32("in_discards"), IF_ENTRY + (14,): c32("in_errors"),
        IF_ENTRY + (16,): c32("out_octets"), IF_ENTRY + (17,): c32("out_ucast_pkts"),
        IF_ENTRY + (19,): c32("out_discards"), IF_ENTRY + (20,): c32("out_errors"),
        IFX_ENTRY + (1,): ("string", i.get("name", "")),                 # ifName
        IFX_ENTRY + (6,): c64("in_octets"), IFX_ENTRY + (7,): c64("in_ucast_pkts"),
        IFX_ENTRY + (10,): c64("out_octets"), IFX_ENTRY + (11,): c64("out_ucast_pkts"),
        IFX_ENTRY + (15,): ("gauge", str(int(i.get("speed_mbps", 0)))),  # ifHighSpeed
        IFX_ENTRY + (18,): ("string", i.get("alias", "")),               # ifAlias
    }
    return [(col + (idx,), kind, value) for col, (kind, value) in rows.items()]


class Table:
    """The state file's rows under one registered subtree (`root`: snmpd asks each
    registration only about its own subtree, and an answer past it ends the walk there)."""

    def __init__(self, path: str, root: tuple = ()):
        self.path, self.root, self.stamp, self.rows = path, root, None, []

    def load(self) -> list[tuple[tuple, str, str]]:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp != self.stamp:
                with open(self.path) as fh:
                    doc = json.load(fh)
                self.rows = sorted(r for k, i in (doc.get("interfaces") or {}).items() for r in columns(int(k), i)
                                   if r[0][:len(self.root)] == self.root)
                self.stamp = stamp
        except (OSError, ValueError):
            pass  # a file being replaced: the last values read
        return self.rows

    def get(self, oid: tuple):
        return next((r for r in self.load() if r[0] == oid), None)

    def getnext(self, oid: tuple):
        return next((r for r in self.load() if r[0] > oid), None)


def _oid(text: str) -> tuple:
    return tuple(int(x) for x in text.strip().strip(".").split(".") if x)


def serve(table: Table, rd=sys.stdin, wr=sys.stdout) -> None:
    while True:
        line = rd.readline()
        if not line:
            return
        cmd = line.strip().lower()
        if cmd == "ping":
            wr.write("PONG\n")
        elif cmd in ("get", "getnext"):
            oid = _oid(rd.readline())
            row = table.get(oid) if cmd == "get" else table.getnext(oid)
            wr.write("NONE\n" if row is None else f".{'.'.join(map(str, row[0]))}\n{row[1]}\n{row[2]}\n")
        elif cmd == "set":
            rd.readline()
            rd.readline()
            wr.write("not-writable\n")
        wr.flush()


if __name__ == "__main__":
    serve(Table(sys.argv[1], _oid(sys.argv[2]) if len(sys.argv) > 2 else ()))
