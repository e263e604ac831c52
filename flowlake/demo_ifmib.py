"""net-snmp `pass_persist` program: the IF-MIB interface tables (ifTable, ifXTable) of one
modelled router, for the demo's snmpd (flowlake/demo_snmp.py).

snmpd starts it as `pass_persist OID PYTHON demo_ifmib.py STATE.json` and talks the
pass_persist protocol on stdin/stdout (net-snmp's snmpd.conf(5), "PASS-THROUGH CONTROL"):
PING -> PONG; `get` / `getnext` + an OID -> OID, type, value (or NONE); `set` -> not-writable.
STATE.json (written by the demo, re-read when it changes) holds the router's interfaces:
{"interfaces": {ifIndex: {"name", "alias", "speed_mbps", "oper_status", "counters": {column: value}}}}.
Standard library only: snmpd starts it once per subtree.
"""
from __future__ import annotations

import json
import os
import sys

IF_TABLE = (1, 3, 6, 1, 2, 1, 2, 2, 1)
IF_X_TABLE = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1)
# column -> (type for pass_persist, how the value comes from an interface's state)
IF_COLUMNS = {
    1: ("integer", lambda i, s: i),                                        # ifIndex
    2: ("string", lambda i, s: s["name"]),                                 # ifDescr
    3: ("integer", lambda i, s: 6),                                        # ifType: ethernetCsmacd
    5: ("gauge", lambda i, s: min(int(s["speed_mbps"]) * 1_000_000, 2 ** 32 - 1)),  # ifSpeed (caps at 2^32-1)
    7: ("integer", lambda i, s: 1),                                        # ifAdminStatus: up
    8: ("integer", lambda i, s: int(s.get("oper_status", 1))),             # ifOperStatus
    13: ("counter", lambda i, s: s["counters"].get("in_discards", 0) % 2 ** 32),
    14: ("counter", lambda i, s: s["counters"].get("in_errors", 0) % 2 ** 32),
    19: ("counter", lambda i, s: s["counters"].get("out_discards", 0) % 2 ** 32),
    20: ("counter", lambda i, s: s["counters"].get("out_errors", 0) % 2 ** 32),
}
IFX_COLUMNS = {
    1: ("string", lambda i, s: s["name"]),                                 # ifName
    6: ("counter64", lambda i, s: s["counters"].get("in_octets", 0)),      # ifHCInOctets
    7: ("counter64", lambda i, s: s["counters"].get("in_ucast_pkts", 0)),  # ifHCInUcastPkts
    10: ("counter64", lambda i, s: s["counters"].get("out_octets", 0)),    # ifHCOutOctets
    11: ("counter64", lambda i, s: s["counters"].get("out_ucast_pkts", 0)),  # ifHCOutUcastPkts
    15: ("gauge", lambda i, s: int(s["speed_mbps"])),                      # ifHighSpeed
    18: ("string", lambda i, s: s.get("alias", "")),                       # ifAlias
}


class Table:
    def __init__(self, state_file: str):
        self.path, self.mtime, self.interfaces = state_file, None, {}

    def load(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except OSError:
            return
        if mtime != self.mtime:
            with open(self.path) as fh:
                self.interfaces = {int(k): v for k, v in json.load(fh)["interfaces"].items()}
            self.mtime = mtime

    def objects(self, base: tuple, columns: dict) -> list[tuple[tuple, str, object]]:
        """Every (OID, type, value) of the table, in OID order."""
        return [(base + (col, idx), typ, get(idx, self.interfaces[idx]))
                for col, (typ, get) in sorted(columns.items()) for idx in sorted(self.interfaces)]


def _oid(text: str) -> tuple:
    return tuple(int(p) for p in text.strip().strip(".").split(".") if p)


def answer(objects, command: str, oid: tuple) -> tuple | None:
    if command == "get":
        return next((o for o in objects if o[0] == oid), None)
    return next((o for o in objects if o[0] > oid), None)  # getnext: the first one after oid


def main(argv: list[str]) -> int:
    table = Table(argv[1])
    out = sys.stdout
    while True:
        line = sys.stdin.readline()
        if not line:
            return 0
        cmd = line.strip().lower()
        if cmd == "ping":
            out.write("PONG\n")
        elif cmd in ("get", "getnext"):
            oid = _oid(sys.stdin.readline())
            table.load()
            base, columns = (IF_X_TABLE, IFX_COLUMNS) if oid[:len(IF_X_TABLE) - 1] == IF_X_TABLE[:-1] else (
                IF_TABLE, IF_COLUMNS)
            found = answer(table.objects(base, columns), cmd, oid)
            if found is None:
                out.write("NONE\n")
            else:
                name, typ, value = found
                out.write(f".{'.'.join(map(str, name))}\n{typ}\n{value}\n")
        elif cmd == "set":
            sys.stdin.readline(), sys.stdin.readline()
            out.write("not-writable\n")
        else:
            out.write("NONE\n")
        out.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
