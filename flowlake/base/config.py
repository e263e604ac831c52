"""One configuration file, `flowlake.toml`, with environment overrides.

Resolution order, later wins:
  1. the defaults in the repository's flowlake.toml (shipped beside the package),
  2. the file named by FLOWLAKE_CONFIG, else ./flowlake.toml if it exists,
  3. environment variables FLOWLAKE_<KEY> (top level) and FLOWLAKE_<SECTION>_<KEY>.

Values from the environment are coerced to the type of the default, so a typo such
as FLOWLAKE_KAFKA_PORT=90x2 fails loudly naming the variable.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULTS_FILE = REPO_ROOT / "flowlake.toml"


# Tables whose keys are the user's (exporter addresses): checked by their owners
# (collectors/sampling.py), not against the defaults.
FREE_TABLES = ("exporters",)


class ConfigError(ValueError):
    """A configuration file or variable is malformed; the message names it."""


def _read_toml(path: Path) -> dict:
    from flowlake.base import parsed_cache  # noqa: PLC0415  (start-up: only when a file is read)

    cached = parsed_cache.get(path)
    if cached is not None:
        return cached
    import tomllib  # noqa: PLC0415  (start-up: only when the file changed: its import and the parse cost ~5 ms a command)

    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    parsed_cache.put(path, data)
    return data


def _coerce(name: str, raw: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            low = raw.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true/false")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, list):
            return [part.strip() for part in raw.split(",") if part.strip()]
        return raw
    except ValueError as exc:
        raise ConfigError(
            f"environment variable {name}={raw!r}: expected {type(default).__name__} ({exc})"
        ) from None


# Keys that existed once: a config still setting them gets told what replaced them.
REMOVED = {
    "delete_after_ship": "removed: nfcapd files are deleted by retention once their flows are in the "
                         "lake ([retention] spool_grace_hours; 0 deletes them as soon as the lake has them)",
}


def _merge(base: dict, over: dict, where: str) -> dict:
    out = dict(base)
    for key, value in over.items():
        if key in FREE_TABLES and isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = {**base[key], **value}
            continue
        if key in REMOVED and key not in base:
            raise ConfigError(f"{where}: {key} was {REMOVED[key]}")
        if key not in base:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(base))})")
        if isinstance(base[key], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: [{key}] must be a table")
            out[key] = _merge(base[key], value, f"{where} [{key}]")
        else:
            default = base[key]
            if default is not None and not isinstance(value, type(default)) and not (
                isinstance(default, float) and isinstance(value, int)
            ):
                raise ConfigError(
                    f"{where}: {key} = {value!r}: expected {type(default).__name__}"
                )
            out[key] = value
    return out


def _apply_env(data: dict, env: dict[str, str]) -> dict:
    out = dict(data)
    for key, value in data.items():
        if key in FREE_TABLES:
            continue
        if isinstance(value, dict):
            sub = dict(value)
            for skey, sval in value.items():
                name = f"FLOWLAKE_{key}_{skey}".upper()
                if name in env:
                    sub[skey] = _coerce(name, env[name], sval)
            out[key] = sub
        else:
            name = f"FLOWLAKE_{key}".upper()
            if name in env:
                out[key] = _coerce(name, env[name], value)
    return out


class Section:
    """Attribute access over one table of the configuration."""

    def __init__(self, name: str, values: dict):
        self._name = name
        self._values = values

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(f"config [{self._name}] has no key {key!r}") from None

    def as_dict(self) -> dict:
        return dict(self._values)


@dataclass
class Config:
    data: dict
    source: Path | None = None
    base_dir: Path = field(default=REPO_ROOT)

    def __getattr__(self, key: str) -> Any:
        data = self.__dict__.get("data", {})
        if key in data:
            value = data[key]
            return Section(key, value) if isinstance(value, dict) else value
        raise AttributeError(f"config has no key {key!r}")

    # --- derived paths: everything lives under home -------------------------------
    @property
    def home_dir(self) -> Path:
        home = Path(os.path.expanduser(self.data["home"]))
        return home if home.is_absolute() else (self.base_dir / home).resolve()

    def path(self, *parts: str) -> Path:
        return self.home_dir.joinpath(*parts)

    @property
    def lake(self) -> Path:
        """The lake's folder: `[lake] uri` (a path, absolute or below the home, or a
        file:// URI), by default $FLOWLAKE_HOME/lake. Object stores (s3://, ...) are
        refused with what remains to do (docs/design/delta-lake.md, step 7)."""
        return lake_path(self.home_dir, ((self.data.get("lake") or {}).get("uri") or "").strip())

    @property
    def kafka_bootstrap(self) -> str:
        k = self.data["kafka"]
        return k["bootstrap"] or f"{k['host']}:{k['port']}"

    def kafka_client_conf(self) -> dict:
        """librdkafka-style settings shared by every client of ours."""
        k = self.data["kafka"]
        conf = {"bootstrap.servers": self.kafka_bootstrap}
        if k["security_protocol"] != "PLAINTEXT":
            conf["security.protocol"] = k["security_protocol"]
            if k["security_protocol"].startswith("SASL"):
                conf["sasl.mechanism"] = k["sasl_mechanism"]
                conf["sasl.username"] = k["sasl_username"]
                conf["sasl.password"] = k["sasl_password"]
            cafile = k["ssl_cafile"]
            if not cafile and k["security_protocol"] == "SASL_SSL":
                local_ca = self.path("kafka", "tls", "ca.pem")  # the local broker's own CA
                cafile = str(local_ca) if local_ca.exists() else ""
            if cafile:
                conf["ssl.ca.location"] = cafile
        return conf

    def kafka_java_conf(self) -> dict:
        """The same settings in the Java client's names (Spark's Kafka source)."""
        conf = self.kafka_client_conf()
        out = {"bootstrap.servers": conf["bootstrap.servers"]}
        if "security.protocol" in conf:
            out["security.protocol"] = conf["security.protocol"]
        if "sasl.mechanism" in conf:
            out["sasl.mechanism"] = conf["sasl.mechanism"]
            module = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule"}.get(
                conf["sasl.mechanism"].upper(), "org.apache.kafka.common.security.scram.ScramLoginModule")
            user = conf["sasl.username"].replace('"', '\\"')
            pw = conf["sasl.password"].replace('"', '\\"')
            out["sasl.jaas.config"] = f'{module} required username="{user}" password="{pw}";'
        if "ssl.ca.location" in conf:
            out["ssl.truststore.type"] = "PEM"
            out["ssl.truststore.location"] = conf["ssl.ca.location"]
        return out

    def as_dict(self) -> dict:
        return {"home_dir": str(self.home_dir), **self.data}


def lake_path(home: Path, uri: str) -> Path:
    """The local folder a `[lake] uri` names; ValueError naming the key for an object store
    or another scheme."""
    from urllib.parse import unquote, urlparse  # noqa: PLC0415  (only for a configured uri)

    if not uri:
        return home / "lake"
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        if parsed.scheme == "file":
            if parsed.netloc not in ("", "localhost"):
                raise ValueError(f"config [lake] uri = {uri!r}: a file:// URI names a local path (file:///srv/lake)")
            return Path(unquote(parsed.path))
        path = Path(os.path.expanduser(uri))
        return path if path.is_absolute() else home / path
    raise ValueError(f"config [lake] uri = {uri!r}: the lake must be a local or mounted folder for now "
                     f"({parsed.scheme}:// is not supported yet: the ingest's and the compactor's writers place "
                     "files in the table folders before they commit them, and every reader takes local paths; "
                     "docs/design/delta-lake.md, step 7)")


def load(path: str | os.PathLike | None = None, env: dict[str, str] | None = None) -> Config:
    env = dict(os.environ if env is None else env)
    data = _read_toml(DEFAULTS_FILE)
    source: Path | None = None
    base_dir = REPO_ROOT
    if path is None:
        path = env.get("FLOWLAKE_CONFIG") or None
        if path is None and Path("flowlake.toml").exists():
            path = "flowlake.toml"
    if path is not None:
        source = Path(path).resolve()
        if source != DEFAULTS_FILE:
            data = _merge(data, _read_toml(source), str(source))
        base_dir = source.parent
    data = _apply_env(data, env)
    return Config(data=data, source=source, base_dir=base_dir)


_cached: Config | None = None


def get() -> Config:
    """The process-wide configuration, read once."""
    global _cached
    if _cached is None:
        _cached = load()
    return _cached


def reset() -> None:
    global _cached
    _cached = None
