"""Superset configuration for flowlake (loaded via SUPERSET_CONFIG_PATH).

Runs inside Superset's own virtualenv, so it imports nothing from flowlake: the
launcher (flowlake/superset_cli.py) passes what it needs in the environment:

  FLOWLAKE_SUPERSET_STATE_DIR   $FLOWLAKE_HOME/superset (metadata DB, secrets, caches)
  FLOWLAKE_SUPERSET_SECRET_KEY  optional; else read from STATE_DIR/secrets.json (mode 600)
  SQLALCHEMY_DATABASE_URI       optional; Postgres in docker-compose, else SQLite in STATE_DIR
  FLOWLAKE_LAKE_DIR             the lake: the only directory DuckDB connections may read

There is no default secret: without a real one Superset refuses to start.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from cachelib.file import FileSystemCache  # noqa: F401  (ships with flask-caching)

STATE_DIR = Path(os.environ.get("FLOWLAKE_SUPERSET_STATE_DIR", "")).expanduser()
if not str(STATE_DIR) or str(STATE_DIR) == ".":
    raise RuntimeError(
        "FLOWLAKE_SUPERSET_STATE_DIR is not set: start Superset with `flowlake up` or "
        "`flowlake superset start`, which point it at $FLOWLAKE_HOME/superset"
    )

# Values Superset's docs and examples ship: never acceptable as a real key.
_KNOWN_DEFAULTS = {"", "CHANGE_ME_TO_A_COMPLEX_RANDOM_SECRET", "thisISaSECRET_1234",
                   "\2\1thisismyscretkey\1\2\\e\\y\\y\\h", "TEST_NON_DEV_SECRET"}


def _secrets() -> dict:
    path = STATE_DIR / "secrets.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"{path}: unreadable secrets file ({exc}); delete it to regenerate") from None


def _secret_key() -> str:
    key = os.environ.get("FLOWLAKE_SUPERSET_SECRET_KEY") or _secrets().get("secret_key", "")
    if key in _KNOWN_DEFAULTS or len(key) < 32:
        raise RuntimeError(
            "Superset needs a real SECRET_KEY (32+ characters): set FLOWLAKE_SUPERSET_SECRET_KEY "
            f"or let `flowlake superset start` generate {STATE_DIR / 'secrets.json'}"
        )
    return key


SECRET_KEY = _secret_key()
SQLALCHEMY_DATABASE_URI = os.environ.get("SQLALCHEMY_DATABASE_URI") or (
    f"sqlite:///{STATE_DIR / 'superset.db'}?check_same_thread=false"
)
DATA_DIR = str(STATE_DIR / "data")

# Local single-user service on loopback, plain HTTP: no HTTPS redirects or CSP nonce
# rewriting that would only get in the way of the bundled JS.
TALISMAN_ENABLED = False
SESSION_COOKIE_SECURE = False
WTF_CSRF_ENABLED = True

FEATURE_FLAGS = {
    "DASHBOARD_NATIVE_FILTERS": True,
    "ENABLE_TEMPLATE_PROCESSING": False,  # SQL in datasets is plain; no Jinja surprises
    "ALERT_REPORTS": False,
    "THUMBNAILS": False,
}

# Query results cached on disk: a dashboard's charts re-render from cache, shared by workers.
_CACHE_DIR = str(STATE_DIR / "cache")
CACHE_CONFIG = {"CACHE_TYPE": "FileSystemCache", "CACHE_DIR": _CACHE_DIR + "/meta",
                "CACHE_DEFAULT_TIMEOUT": 300, "CACHE_KEY_PREFIX": "flowlake_meta_"}
DATA_CACHE_CONFIG = {"CACHE_TYPE": "FileSystemCache", "CACHE_DIR": _CACHE_DIR + "/data",
                     "CACHE_DEFAULT_TIMEOUT": 600, "CACHE_KEY_PREFIX": "flowlake_data_"}
FILTER_STATE_CACHE_CONFIG = {"CACHE_TYPE": "FileSystemCache", "CACHE_DIR": _CACHE_DIR + "/filter",
                             "CACHE_DEFAULT_TIMEOUT": 86400}
EXPLORE_FORM_DATA_CACHE_CONFIG = {"CACHE_TYPE": "FileSystemCache", "CACHE_DIR": _CACHE_DIR + "/explore",
                                  "CACHE_DEFAULT_TIMEOUT": 86400}

# flask-limiter's in-memory storage is per process; fine for one local service.
RATELIMIT_STORAGE_URI = "memory://"

SQLLAB_TIMEOUT = 60
SUPERSET_WEBSERVER_TIMEOUT = 120
ROW_LIMIT = 50000


# ---- the lake connection: DuckDB, read-only, confined to the lake directory -----------
# duckdb-engine passes `allowed_directories` to duckdb.connect(), where DuckDB refuses it
# ("cannot set before the database is started"), so every new DuckDB connection is
# locked down here instead: only the lake is readable, no extension loading, and the
# configuration is locked so SQL Lab cannot undo it.
LAKE_DIR = os.environ.get("FLOWLAKE_LAKE_DIR", "")

from sqlalchemy import event  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@event.listens_for(Engine, "connect")
def _confine_duckdb(dbapi_connection, _record):  # noqa: ANN001
    if not type(dbapi_connection).__module__.startswith("duckdb"):
        return
    allowed = f"[{_quote(LAKE_DIR.rstrip('/') + '/')}]" if LAKE_DIR else "[]"
    for stmt in (
        f"SET allowed_directories = {allowed}",
        "SET enable_external_access = false",
        "SET autoinstall_known_extensions = false",
        "SET autoload_known_extensions = false",
        "SET lock_configuration = true",
    ):
        dbapi_connection.execute(stmt)


class ReadOnlyLakeError(Exception):
    """A statement other than a read was sent to the lake connection."""


def _reject_writes(sql: str) -> None:
    """DuckDB may still COPY TO a file inside allowed_directories, and Superset's
    DML check does not count COPY/EXPORT/ATTACH as mutations: allow reads only."""
    import sqlglot
    from sqlglot import exp

    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except sqlglot.errors.ParseError as exc:
        raise ReadOnlyLakeError(f"the flowlake lake is read-only; statement not understood: {exc}") from None
    for stmt in statements:
        if not isinstance(stmt, (exp.Query, exp.Describe)):
            kind = type(stmt).__name__.upper()
            raise ReadOnlyLakeError(f"the flowlake lake is read-only: {kind} statements are not allowed")


def SQL_QUERY_MUTATOR(sql, security_manager=None, database=None, **_kw):  # noqa: N802
    if database is not None and getattr(database, "backend", "") == "duckdb":
        _reject_writes(sql)
    return sql
