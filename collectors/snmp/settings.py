"""Which exporters the poller asks, and how: [snmp] defaults, per-exporter overrides in the
exporter's own table beside its sampling settings ([exporters."ADDR"] snmp_<key> = ...).

An exporter has SNMP when its table says `snmp = true` or sets any snmp_* key, or, with
[snmp] poll_seen = true, when it has sent flows (the exporter health state names it) and
its table does not say `snmp = false`. `[exporters."*"]` snmp_* keys apply to all.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from flowlake.base import config as _config
from flowlake.collectors import health

# [snmp] keys an exporter's table may override as snmp_<key>
AGENT_KEYS = ("version", "community", "port", "user", "auth_protocol", "auth_password",
              "priv_protocol", "priv_password", "timeout_seconds", "retries")
AUTH_PROTOCOLS = ("MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512")
PRIV_PROTOCOLS = ("DES", "3DES", "AES", "AES128", "AES192", "AES256")


@dataclass(frozen=True)
class Agent:
    exporter: str            # as in the flows' exporter column
    address: str             # where the agent answers (snmp_agent, else the exporter)
    port: int
    version: str             # "2c" or "3"
    community: str = ""
    user: str = ""
    auth_protocol: str = "SHA"
    auth_password: str = ""
    priv_protocol: str = "AES"
    priv_password: str = ""
    timeout_seconds: float = 2.0
    retries: int = 1

    def describe(self) -> str:
        who = "" if self.version == "2c" else f" user {self.user!r} authPriv"  # never the community: a password
        return f"{self.address}:{self.port} SNMPv{self.version}{who}"


def _check(addr: str, values: dict) -> None:
    where = f'[exporters."{addr}"] snmp_' if addr else "[snmp] "
    if values["version"] not in ("2c", "3"):
        raise _config.ConfigError(f'{where}version = {values["version"]!r}: expected "2c" or "3"')
    if values["version"] == "3":
        if not values["user"]:
            raise _config.ConfigError(f"{where}user is empty: SNMPv3 needs a user (authPriv)")
        for key, allowed in (("auth_protocol", AUTH_PROTOCOLS), ("priv_protocol", PRIV_PROTOCOLS)):
            if str(values[key]).upper() not in allowed:
                raise _config.ConfigError(f"{where}{key} = {values[key]!r}: expected one of {', '.join(allowed)}")
        for key in ("auth_password", "priv_password"):
            if len(values[key]) < 8:  # RFC 3414: USM pass phrases are at least 8 characters
                raise _config.ConfigError(f"{where}{key}: at least 8 characters for SNMPv3 authPriv")
    if not 0 < int(values["port"]) < 65536:
        raise _config.ConfigError(f"{where}port = {values['port']!r}: expected a UDP port 1-65535")


def _overrides(addr: str, table: dict) -> dict:
    out = {}
    for key, value in table.items():
        if not key.startswith("snmp_") or key == "snmp_agent":
            continue
        name = key[len("snmp_"):]
        if name not in AGENT_KEYS:
            raise _config.ConfigError(f'[exporters."{addr}"] {key}: unknown (known: snmp, snmp_agent, '
                                      + ", ".join(f"snmp_{k}" for k in AGENT_KEYS) + ")")
        out[name] = value
    return out


def _has_snmp(addr: str, table: dict) -> bool | None:
    """True/False when the table decides, None when it says nothing about SNMP."""
    if "snmp" in table:
        if not isinstance(table["snmp"], bool):
            raise _config.ConfigError(f'[exporters."{addr}"] snmp = {table["snmp"]!r}: expected true or false')
        return table["snmp"]
    return True if any(k.startswith("snmp_") for k in table) else None


def seen_exporters(cfg) -> list[str]:
    """Exporters that sent flows, from the shipper's exporter health state."""
    try:
        st = json.loads(health.state_file(cfg).read_text())
    except (OSError, ValueError):
        return []
    return sorted({e["exporter"] for e in st.get("exporters") or [] if e.get("exporter")})


def agents(cfg=None) -> dict[str, Agent]:
    """Every exporter to poll, by its address in the flows, with its agent settings."""
    cfg = cfg or _config.get()
    base = {k: cfg.snmp.as_dict()[k] for k in AGENT_KEYS}
    tables = {a: t for a, t in (cfg.data.get("exporters") or {}).items() if isinstance(t, dict)}
    star = tables.get("*", {})
    base.update(_overrides("*", star))
    _check("", base)
    chosen = {a for a, t in tables.items() if a != "*" and _has_snmp(a, t)}
    if cfg.snmp.poll_seen or _has_snmp("*", star):
        chosen |= {a for a in seen_exporters(cfg) if _has_snmp(a, tables.get(a, {})) is not False}
    out = {}
    for addr in sorted(chosen):
        table = tables.get(addr, {})
        values = {**base, **_overrides(addr, table)}
        _check(addr, values)
        agent_addr = table.get("snmp_agent", addr)
        if not isinstance(agent_addr, str) or not agent_addr:
            raise _config.ConfigError(f'[exporters."{addr}"] snmp_agent = {agent_addr!r}: expected an address')
        out[addr] = Agent(exporter=addr, address=agent_addr, port=int(values["port"]), version=str(values["version"]),
                          community=str(values["community"]), user=str(values["user"]),
                          auth_protocol=str(values["auth_protocol"]).upper(), auth_password=str(values["auth_password"]),
                          priv_protocol=str(values["priv_protocol"]).upper(), priv_password=str(values["priv_password"]),
                          timeout_seconds=float(values["timeout_seconds"]), retries=int(values["retries"]))
    return out


def enabled(cfg=None) -> bool:
    """Whether `flowlake up` starts the poller: some exporter has SNMP, or poll_seen is on."""
    cfg = cfg or _config.get()
    tables = {a: t for a, t in (cfg.data.get("exporters") or {}).items() if isinstance(t, dict)}
    return bool(cfg.snmp.poll_seen) or any(_has_snmp(a, t) for a, t in tables.items())
