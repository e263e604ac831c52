"""The SNMP requests, with pysnmp (asyncio high-level API), numeric OIDs only: Debian's
net-snmp ships no MIB files, and numbers need none (`lookupMib=False`: pysnmp's MIB view
resolution of every answer was most of a poll's CPU).

Each column is a GETBULK walk that stops at the end of its subtree; an agent's columns are
walked at once (one round trip's latency, not one per column).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from flowlake.schemas.snmp import COUNTERS

from .settings import Agent

SYS_UPTIME = "1.3.6.1.2.1.1.3.0"
SYS_NAME = "1.3.6.1.2.1.1.5.0"
IF_NAME = "1.3.6.1.2.1.31.1.1.1.1"
IF_ALIAS = "1.3.6.1.2.1.31.1.1.1.18"
IF_HIGH_SPEED = "1.3.6.1.2.1.31.1.1.1.15"   # Mbit/s
IF_SPEED = "1.3.6.1.2.1.2.2.1.5"            # bit/s, Gauge32 (caps at 4.29 Gbit/s)
IF_OPER_STATUS = "1.3.6.1.2.1.2.2.1.8"
IF_DESCR = "1.3.6.1.2.1.2.2.1.2"            # the name when ifName is missing (old agents)


BULK = 50  # GETBULK max-repetitions of a walk when the interface count is not known yet


class SnmpError(RuntimeError):
    """An agent did not answer as asked; the message says what to check."""


@dataclass
class Inventory:
    sys_name: str
    interfaces: dict[int, dict] = field(default_factory=dict)  # ifIndex -> name, description, speed_mbps, oper_status


@dataclass
class Sample:
    sys_uptime_cs: int
    counters: dict[int, dict[str, int]] = field(default_factory=dict)  # ifIndex -> counter name -> raw value


def _auth(agent: Agent):
    from pysnmp.hlapi.v3arch import asyncio as hl  # noqa: PLC0415  (start-up: pysnmp)

    if agent.version == "2c":
        return hl.CommunityData(agent.community, mpModel=1)
    auth = {"MD5": hl.usmHMACMD5AuthProtocol, "SHA": hl.usmHMACSHAAuthProtocol,
            "SHA224": hl.usmHMAC128SHA224AuthProtocol, "SHA256": hl.usmHMAC192SHA256AuthProtocol,
            "SHA384": hl.usmHMAC256SHA384AuthProtocol, "SHA512": hl.usmHMAC384SHA512AuthProtocol}[agent.auth_protocol]
    priv = {"DES": hl.usmDESPrivProtocol, "3DES": hl.usm3DESEDEPrivProtocol, "AES": hl.usmAesCfb128Protocol,
            "AES128": hl.usmAesCfb128Protocol, "AES192": hl.usmAesCfb192Protocol,
            "AES256": hl.usmAesCfb256Protocol}[agent.priv_protocol]
    return hl.UsmUserData(agent.user, agent.auth_password, agent.priv_password, authProtocol=auth, privProtocol=priv)


def _explain(agent: Agent, indication) -> str:
    text = str(indication)
    if "timeout" in text.lower():
        hint = ("agent down or unreachable, or a wrong community: SNMPv2c agents do not answer one"
                if agent.version == "2c" else "agent down or unreachable, or an unknown user")
        tries = agent.retries + 1
        return (f"timeout: no answer from {agent.describe()} within {agent.timeout_seconds:g} s "
                f"x {tries} {'try' if tries == 1 else 'tries'} ({hint})")
    if "digest" in text.lower() or "decrypt" in text.lower() or "unknown user" in text.lower():
        return f"authentication failed at {agent.describe()}: {text} (check the user's passwords and protocols)"
    return f"{agent.describe()}: {text}"


class Session:
    """Requests to one agent over one engine.

    `rows`: the interfaces the agent is known to have (0: unknown); a walk then asks for
    that many rows and one more in one GETBULK, instead of 50 (most of which belong to the
    next column and are decoded for nothing)."""

    def __init__(self, engine, agent: Agent, rows: int = 0):
        self.engine, self.agent = engine, agent
        self.target = None
        self.bulk = min(BULK, rows + 1) if rows else BULK

    async def _target(self):
        from pysnmp.hlapi.v3arch import asyncio as hl  # noqa: PLC0415  (start-up: pysnmp)

        if self.target is None:
            cls = hl.Udp6TransportTarget if ":" in self.agent.address else hl.UdpTransportTarget
            try:
                self.target = await cls.create((self.agent.address, self.agent.port),
                                               timeout=self.agent.timeout_seconds, retries=self.agent.retries)
            except Exception as exc:  # a name that does not resolve, a bad address
                raise SnmpError(f"{self.agent.describe()}: bad agent address: {exc}") from None
        return self.target

    async def get(self, *oids: str) -> list:
        from pysnmp.hlapi.v3arch import asyncio as hl  # noqa: PLC0415  (start-up: pysnmp)

        err, status, index, binds = await hl.get_cmd(
            self.engine, _auth(self.agent), await self._target(), hl.ContextData(),
            *(hl.ObjectType(hl.ObjectIdentity(o)) for o in oids), lookupMib=False)
        if err:
            raise SnmpError(_explain(self.agent, err))
        if status:
            raise SnmpError(f"{self.agent.describe()}: {status.prettyPrint()} at {oids[int(index) - 1] if index else '?'}")
        return [value for _, value in binds]

    async def walk(self, oid: str) -> dict[int, object]:
        """{ifIndex (last sub-identifier): value} of one table column."""
        from pysnmp.hlapi.v3arch import asyncio as hl  # noqa: PLC0415  (start-up: pysnmp)

        out = {}
        async for err, status, index, binds in hl.bulk_walk_cmd(
                self.engine, _auth(self.agent), await self._target(), hl.ContextData(), 0, self.bulk,
                hl.ObjectType(hl.ObjectIdentity(oid)), lexicographicMode=False, lookupMib=False):
            if err:
                raise SnmpError(_explain(self.agent, err))
            if status:
                raise SnmpError(f"{self.agent.describe()}: {status.prettyPrint()} walking {oid}")
            for name, value in binds:
                out[int(tuple(name)[-1])] = value
        return out


def _present(value) -> bool:
    """False for noSuchObject / noSuchInstance / endOfMibView (and empty values)."""
    from pysnmp.proto.rfc1905 import EndOfMibView, NoSuchInstance, NoSuchObject  # noqa: PLC0415  (start-up: pysnmp)

    return not isinstance(value, (NoSuchObject, NoSuchInstance, EndOfMibView))


def _text(value) -> str:
    if not _present(value):
        return ""
    raw = bytes(value.asOctets()) if hasattr(value, "asOctets") else str(value).encode()
    return raw.decode("utf-8", errors="replace")


async def inventory(session: Session) -> Inventory:
    (name,) = await session.get(SYS_NAME)  # first alone: a dead agent costs one timeout, not six
    names, aliases, high, low, oper = await asyncio.gather(*(session.walk(o) for o in (
        IF_NAME, IF_ALIAS, IF_HIGH_SPEED, IF_SPEED, IF_OPER_STATUS)))
    names = names or await session.walk(IF_DESCR)
    out = Inventory(sys_name=_text(name))
    for idx in sorted(set(names) | set(oper) | set(high) | set(low)):
        if idx in high and _present(high[idx]) and int(high[idx]):
            speed = int(high[idx])
        elif idx in low and _present(low[idx]):
            speed = int(low[idx]) // 1_000_000
        else:
            speed = 0
        out.interfaces[idx] = {"name": _text(names.get(idx, "")) if idx in names else "",
                               "description": _text(aliases[idx]) if idx in aliases else "",
                               "speed_mbps": speed,
                               "oper_status": int(oper[idx]) if idx in oper and _present(oper[idx]) else 0}
    return out


async def sample(session: Session) -> Sample:
    (uptime,) = await session.get(SYS_UPTIME)
    if not _present(uptime):
        raise SnmpError(f"{session.agent.describe()}: no sysUpTime ({SYS_UPTIME})")
    out = Sample(sys_uptime_cs=int(uptime))
    columns = await asyncio.gather(*(session.walk(oid) for _name, oid, _bits in COUNTERS))
    for (name, _oid, _bits), values in zip(COUNTERS, columns):
        for idx, value in values.items():
            if _present(value):
                out.counters.setdefault(idx, {})[name] = int(value)
    return out


def new_engine():
    from pysnmp.hlapi.v3arch import asyncio as hl  # noqa: PLC0415  (start-up: pysnmp)

    return hl.SnmpEngine()
