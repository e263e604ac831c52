"""Counter deltas between two polls of one interface (pure: no I/O).

- A counter below its previous value while the agent kept running wrapped: the delta
  is taken modulo 2^bits (64 for the HC counters, 32 for errors and discards).
- sysUpTime below its previous value means the agent restarted: its counters started
  again from zero at an unknown moment, so the row's deltas are null (`reset`), never
  guessed; the next poll continues from this one's raw values.
"""
from __future__ import annotations

from flowlake.schemas.snmp import COUNTERS

BITS = {name: bits for name, _oid, bits in COUNTERS}
TIMETICKS_WRAP = 2 ** 32  # sysUpTime is a 32-bit TimeTicks (497 days)


def restarted(prev_uptime_cs: int, uptime_cs: int, elapsed_s: float) -> bool:
    """sysUpTime went back, unless it wrapped (only possible after ~497 days of uptime
    and then the wall clock moved about as much as the wrapped ticks say)."""
    if uptime_cs >= prev_uptime_cs:
        return False
    wrapped = (uptime_cs + TIMETICKS_WRAP - prev_uptime_cs) / 100.0
    return not (prev_uptime_cs > TIMETICKS_WRAP * 0.9 and abs(wrapped - elapsed_s) < max(60.0, elapsed_s * 0.5))


def delta(name: str, prev: int | None, cur: int | None) -> int | None:
    if prev is None or cur is None:
        return None
    modulus = 2 ** BITS[name]
    return (cur - prev) % modulus  # equal to cur - prev without a wrap, the wrapped distance with one


def signed64(value: int) -> int:
    """A Counter64 stored in a signed 64-bit column (the raw value, modulo 2^64)."""
    return value - 2 ** 64 if value >= 2 ** 63 else value


def unsigned64(value: int) -> int:
    return value + 2 ** 64 if value < 0 else value


def rows(prev: dict | None, cur: dict) -> list[dict]:
    """One row per interface of `cur`; prev/cur: {"time_ms", "sys_uptime_cs", "counters":
    {ifIndex: {counter: raw}}} (prev None on the first poll: null deltas)."""
    elapsed = (cur["time_ms"] - prev["time_ms"]) / 1000.0 if prev else None
    reset = bool(prev) and restarted(prev["sys_uptime_cs"], cur["sys_uptime_cs"], elapsed)
    out = []
    for idx, values in sorted(cur["counters"].items()):
        before = None if (prev is None or reset) else prev["counters"].get(idx)
        row = {"if_index": idx, "sys_uptime_cs": cur["sys_uptime_cs"], "reset": reset,
               "interval_s": elapsed if before is not None else None}
        for name, _oid, _bits in COUNTERS:
            row[name] = delta(name, before.get(name) if before else None, values.get(name))
            row[f"{name}_counter"] = signed64(values.get(name, 0))
        out.append(row)
    return out
