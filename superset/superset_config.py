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

import atexit
import json
import os
import sys
import threading
import weakref
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
if SQLALCHEMY_DATABASE_URI.startswith("sqlite:"):
    # SQLAlchemy 1.4 gives file SQLite a NullPool: every commit (each API request commits
    # its event-log rows) closed the connection, and closing checkpoints and fsyncs the
    # file: 10-20 ms a request here. A small pool keeps connections open; with WAL and
    # synchronous=NORMAL (set per connection below) a commit costs microseconds.
    from sqlalchemy.pool import QueuePool

    SQLALCHEMY_ENGINE_OPTIONS = {"poolclass": QueuePool, "pool_size": 5, "max_overflow": 10,
                                 "pool_pre_ping": False}

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
# Chart data is kept for a day, but an entry stored before the report jobs last rewrote a
# report table is a miss (superset/lake_cache.py); datasets over the raw flows and active
# results, which grow all the time, keep theirs for 5 minutes (cache_timeout in the bundle).
def _load_module(name: str, path: Path):
    """A file of this repository as module `name`, by path: flask-caching imports a class by
    dotted name, and Superset's virtualenv has no flowlake package. This folder is not put on
    sys.path, where it would make this file importable as `superset_config` a second time."""
    import importlib.util

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _register_lake_cache() -> str:
    """superset/lake_cache.py as module `flowlake_lake_cache`."""
    _load_module("flowlake_lake_cache", Path(__file__).resolve().parent / "lake_cache.py")
    return "flowlake_lake_cache.LakeAwareCache"


LAKE_DIR = os.environ.get("FLOWLAKE_LAKE_DIR", "")
_CACHE_DIR = str(STATE_DIR / "cache")
CACHE_CONFIG = {"CACHE_TYPE": "FileSystemCache", "CACHE_DIR": _CACHE_DIR + "/meta",
                "CACHE_DEFAULT_TIMEOUT": 300, "CACHE_KEY_PREFIX": "flowlake_meta_"}
DATA_CACHE_CONFIG = {"CACHE_TYPE": _register_lake_cache(), "CACHE_DIR": _CACHE_DIR + "/data",
                     "CACHE_DEFAULT_TIMEOUT": 86400, "CACHE_KEY_PREFIX": "flowlake_data_",
                     "CACHE_THRESHOLD": 5000, "CACHE_LAKE_DIR": LAKE_DIR}
FILTER_STATE_CACHE_CONFIG = {"CACHE_TYPE": "FileSystemCache", "CACHE_DIR": _CACHE_DIR + "/filter",
                             "CACHE_DEFAULT_TIMEOUT": 86400}
EXPLORE_FORM_DATA_CACHE_CONFIG = {"CACHE_TYPE": "FileSystemCache", "CACHE_DIR": _CACHE_DIR + "/explore",
                                  "CACHE_DEFAULT_TIMEOUT": 86400}

# No animations: ECharts animates every chart for a second after it is drawn, and Ant
# Design animates menus and panels; on a 2-core box that drawing competed with the charts
# still loading (THEME_DEFAULT/THEME_DARK are Superset's own, with these two overrides).
def _still(theme):
    import copy

    theme = copy.deepcopy(theme) if theme else {"token": {}}
    theme.setdefault("token", {})["motion"] = False
    theme["echartsOptionsOverrides"] = {**theme.get("echartsOptionsOverrides", {}), "animation": False}
    return theme


try:
    from superset.config import THEME_DARK as _THEME_DARK, THEME_DEFAULT as _THEME_DEFAULT
except ImportError:  # only outside Superset (unit tests of this file)
    _THEME_DEFAULT = _THEME_DARK = None
THEME_DEFAULT = _still(_THEME_DEFAULT)
THEME_DARK = _still(_THEME_DARK) if _THEME_DARK else None

# No usage telemetry. SCARF_ANALYTICS only covers the server; Superset 6.1's prebuilt
# front end still draws a tracking pixel from apachesuperset.gateway.scarf.sh on every
# page, which would tell an outside host who reads the border reports and when. A content
# security policy makes the browser refuse it: images and fetches from this server only
# (no map tiles either: no dashboard here has a map). Scripts and styles are left alone,
# Talisman's nonce policy stays off (see above).
SCARF_ANALYTICS = False
OVERRIDE_HTTP_HEADERS = {"Content-Security-Policy": "img-src 'self' data: blob:; connect-src 'self'"}
CONTENT_SECURITY_POLICY_WARNING = False  # the policy above is ours; Superset only looks at Talisman's

# Superset 6.1's wheel lacks the spinner its pages show while the scripts load (it reads
# it from superset-frontend/, which is not packaged): every page logged a warning and
# showed a blank screen for the 1-2 s the scripts take. This one is drawn instead.
_SPINNER_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 50 50" width="70" height="70">'
                '<circle cx="25" cy="25" r="20" fill="none" stroke="#20a7c9" stroke-width="4" '
                'stroke-linecap="round" stroke-dasharray="90 40"><animateTransform '
                'attributeName="transform" type="rotate" from="0 25 25" to="360 25 25" dur="1s" '
                'repeatCount="indefinite"/></circle></svg>')


def _not_the_anonymous_user_noise(record) -> bool:
    # Superset 6.1 logs every event of a request without a logged-in user (a login page's
    # own calls, a request racing the login) as a warning: it tries to add the anonymous
    # user, a LocalProxy, to the DB session. Upstream calls it expected noise and stopped
    # logging it (apache/superset#42306, "stop noisy LocalProxy-not-mapped warning for
    # guest users"); this drops just that line until the pinned release has the fix.
    msg = record.getMessage()
    return not (msg.startswith("Failed to add user to db session") and "LocalProxy" in msg)


def _quiet_the_anonymous_user_noise() -> None:
    import logging

    root = logging.getLogger()  # superset/utils/log.py logs it through the root logger
    if _not_the_anonymous_user_noise not in root.filters:
        root.addFilter(_not_the_anonymous_user_noise)


def FLASK_APP_MUTATOR(app):  # noqa: N802, ARG001
    import superset.views.base as views_base

    views_base.get_default_spinner_svg = lambda: _SPINNER_SVG
    _quiet_the_anonymous_user_noise()

# flask-limiter's in-memory storage is per process; fine for one local service.
RATELIMIT_STORAGE_URI = "memory://"

SQLLAB_TIMEOUT = 60
SUPERSET_WEBSERVER_TIMEOUT = 120
ROW_LIMIT = 50000


# ---- the lake connection: DuckDB, read-only, confined to the lake directory -----------
# duckdb-engine passes `allowed_directories` to duckdb.connect(), where DuckDB refuses it
# ("cannot set before the database is started"), so every new DuckDB connection is
# locked down here instead: only the lake is readable, no extension loading (the delta
# extension, when a view needs it, is loaded before), and the configuration is locked so
# SQL Lab cannot undo it.

from sqlalchemy import event  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# ---- Delta tables: DuckDB's delta extension, loaded from its package file ---------------
# A view over a lake table that is a Delta table (superset/bundle.py, `_delta_log/` in the
# table's folder) reads `delta_scan('<table>')`: one table version per query, so a
# compaction or retention commit never fails or halves a read. The extension comes from the
# PyPI package duckdb-extension-delta (superset/requirements.txt pins it to the venv's
# DuckDB); a plain `LOAD delta` would try to download it. It is loaded into a DuckDB
# instance before the instance is confined (after that, no file outside the lake may be
# read), and only when the views file has a Delta view: until a table is converted nothing
# changes. A DuckDB process that exits with the extension loaded and a connection open may
# abort ("terminate called without an active exception"), so every such connection is
# closed at exit (Superset's own pool closes them after each query already).
_DELTA_VIEWS_SQL = ("SELECT count(*) FROM duckdb_views() WHERE NOT internal "
                    "AND lower(sql) LIKE '%delta_scan(%'")
_DELTA_CONNECTIONS: weakref.WeakSet = weakref.WeakSet()


def delta_extension_file() -> Path:
    """The delta extension built for this DuckDB, shipped by duckdb-extension-delta."""
    import duckdb

    version = duckdb.__version__
    try:
        import duckdb_extension_delta
    except ImportError:
        raise RuntimeError(f"a lake table is a Delta table, but Superset's virtualenv lacks the package "
                           f"duckdb-extension-delta=={version}: run `make setup` (scripts/setup-superset.sh)") from None
    package = Path(duckdb_extension_delta.__file__).resolve().parent
    path = package / "extensions" / f"v{version}" / "delta.duckdb_extension"
    if not path.is_file():
        raise RuntimeError(f"a lake table is a Delta table, but {path} is missing: Superset's DuckDB is {version}; "
                           f"install duckdb-extension-delta=={version} (superset/requirements.txt)")
    return path


def _load_delta_if_needed(dbapi_connection) -> bool:  # noqa: ANN001
    """LOAD the delta extension when this database's views read a Delta table."""
    if not dbapi_connection.execute(_DELTA_VIEWS_SQL).fetchone()[0]:
        return False
    dbapi_connection.execute(f"LOAD {_quote(str(delta_extension_file()))}")
    return True


@atexit.register
def _close_delta_connections() -> None:
    for con in list(_DELTA_CONNECTIONS):
        try:
            con.close()
        except Exception:  # noqa: BLE001, S110 - at exit: nothing to report to
            pass


@event.listens_for(Engine, "connect")
def _confine_duckdb(dbapi_connection, _record):  # noqa: ANN001
    if type(dbapi_connection).__module__.startswith("sqlite3"):
        # The local metadata DB: every API request commits its event-log rows, and
        # SQLite's default (rollback journal, fsync per commit) cost more than serving a
        # cached chart. WAL + synchronous=NORMAL stays crash-safe (a power cut may lose
        # the last commits, never corrupt the file).
        dbapi_connection.execute("PRAGMA journal_mode=WAL")
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")
        return
    if not type(dbapi_connection).__module__.startswith("duckdb"):
        return
    allowed = f"[{_quote(LAKE_DIR.rstrip('/') + '/')}]" if LAKE_DIR else "[]"
    # Settings belong to the database instance, and concurrent connections of one process
    # to the same file share it: the first confines and locks it, the others find it so.
    with _CONFINE_LOCK:
        locked, external = dbapi_connection.execute(
            "SELECT current_setting('lock_configuration'), current_setting('enable_external_access')").fetchone()
        if locked and not external:
            # confined by an earlier connection, which loaded the extension if it was needed
            # (duckdb_extensions() would list ~/.duckdb: refused once confined)
            if dbapi_connection.execute("SELECT count(*) FROM duckdb_functions() "
                                        "WHERE function_name = 'delta_scan'").fetchone()[0]:
                _DELTA_CONNECTIONS.add(dbapi_connection)
            return
        if _load_delta_if_needed(dbapi_connection):
            _DELTA_CONNECTIONS.add(dbapi_connection)
        for stmt in (
            f"SET allowed_directories = {allowed}",
            "SET enable_external_access = false",
            "SET autoinstall_known_extensions = false",
            "SET autoload_known_extensions = false",
            "SET lock_configuration = true",
        ):
            dbapi_connection.execute(stmt)


_CONFINE_LOCK = threading.Lock()


# Opening the views file: Superset opens a DuckDB connection per chart query and closes it
# after (so a re-provisioned views file is seen at once), and DuckDB's per-process cache of
# database instances can race an open against the last close of the same file: a
# clean-clone run logged "Unique file handle conflict: Cannot attach "lake_views" - the
# database file ... is already attached" for one chart query. Opens are made one at a time,
# and one that meets the conflict (the closing instance not yet gone) is tried again.
# SQLAlchemy 1.4 calls a do_connect listener of the dialect's own class, not one on Engine
# (listened on Engine, this never ran, and a clean-clone run logged the conflict again).
_OPEN_LOCK = threading.Lock()
OPEN_RETRIES = {"conflicts": 0}  # opens that met the conflict and were tried again (tests read it)


def _open_duckdb_one_at_a_time(dialect, _record, cargs, cparams):  # noqa: ANN001
    if dialect.name != "duckdb":
        return None
    import time  # noqa: PLC0415

    import duckdb  # noqa: PLC0415

    for attempt in range(40):
        try:
            with _OPEN_LOCK:
                return dialect.connect(*cargs, **cparams)
        except duckdb.BinderException as e:
            if "Unique file handle conflict" not in str(e) or attempt == 39:
                raise
            OPEN_RETRIES["conflicts"] += 1
            time.sleep(0.05)
    return None


try:
    import duckdb_engine as _duckdb_engine

    event.listen(_duckdb_engine.Dialect, "do_connect", _open_duckdb_one_at_a_time)
except ImportError:  # no DuckDB driver: no lake connection to open
    pass


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


# ---- duckdb-engine 0.17: two per-connection costs cached ------------------------------
# Each new SQLAlchemy dialect asked a fresh DuckDB for its reserved keywords, and each new
# connection opened a second, throw-away DuckDB to list the setting names; both answers
# are fixed for the installed DuckDB. Together they were ~25 ms of every uncached chart
# query (and a few ms of cached ones). Patched only where duckdb-engine has them.
def _speed_up_duckdb_engine() -> None:
    import functools

    try:
        import duckdb
        import duckdb_engine
    except ImportError:
        return
    if callable(getattr(duckdb_engine, "get_core_config", None)):
        duckdb_engine.get_core_config = functools.lru_cache(maxsize=1)(duckdb_engine.get_core_config)
    preparer = getattr(duckdb_engine, "DuckDBIdentifierPreparer", None)
    if preparer is None:
        return
    base = preparer.__mro__[1]

    @functools.lru_cache(maxsize=1)
    def reserved() -> frozenset:
        with duckdb.connect() as con:
            return frozenset(k for (k,) in con.execute(
                "SELECT keyword_name FROM duckdb_keywords() WHERE keyword_category = 'reserved'").fetchall())

    def __init__(self, dialect, **kwargs):  # noqa: N807
        base.__init__(self, dialect, **kwargs)
        self.reserved_words.update(reserved())

    preparer.__init__ = __init__


_speed_up_duckdb_engine()


# ---- reads that meet a compaction swap: re-run, never a partial answer ----------------
# A dataset view globs lake/<table>/**/*.parquet: DuckDB lists the files when the query
# starts and opens them while it runs, so a compactor swap in between fails the read with
# "Cannot open file ...: No such file or directory" (never a wrong count). The rerun, and
# why it is exact, is pipelines/lake.py's (shared with analysts' `flowlake.lake.duckdb_connect`).
# DuckDB 2 streams results (the error may come with the first fetch, not at execute), so a
# statement's rows are fetched here, inside the retry, and served from that buffer;
# Superset fetches every row anyway (its LIMIT is in the SQL).
try:
    _lake = _load_module("flowlake_lake", Path(__file__).resolve().parent.parent / "pipelines" / "lake.py")
    SWAP_RETRIES, SWAP_RETRIED = _lake.SWAP_RETRIES, _lake.SWAP_RETRIED
except ImportError:  # only outside Superset, without DuckDB (unit tests of this file)
    _lake = None


def _retry_swapped_reads() -> None:
    import logging

    try:
        import duckdb
        import duckdb_engine
    except ImportError:
        return
    cursor_cls = getattr(duckdb_engine, "CursorWrapper", None)
    if _lake is None or cursor_cls is None or getattr(cursor_cls, "_flowlake_retry", False):
        return
    log = logging.getLogger("flowlake.superset")
    execute = cursor_cls.execute

    def retrying_execute(self, statement, parameters=None, context=None):  # noqa: ANN001
        raw = self._CursorWrapper__c
        self._flowlake_rows = self._flowlake_description = None

        def attempt():
            execute(self, statement, parameters, context)
            description = raw.description
            if description is not None:  # a statement with rows: read them all here
                self._flowlake_rows = list(raw.fetchall())
                self._flowlake_description = description

        def fresh_transaction():  # an error aborts the open transaction (reads only)
            try:
                raw.rollback()
            except duckdb.Error:
                return  # none was open
            raw.begin()

        _lake.run_retrying(attempt, LAKE_DIR, fresh_transaction, log)

    def _rows(self):  # noqa: ANN001
        return getattr(self, "_flowlake_rows", None)

    def fetchall(self):  # noqa: ANN001
        rows = _rows(self)
        if rows is None:
            return self._CursorWrapper__c.fetchall()
        out, self._flowlake_rows = rows, []
        return out

    def fetchmany(self, size=None):  # noqa: ANN001
        rows = _rows(self)
        if rows is None:
            c = self._CursorWrapper__c
            return c.fetchmany() if size is None else c.fetchmany(size)
        size = 1 if size is None else size
        out, self._flowlake_rows = rows[:size], rows[size:]
        return out

    def fetchone(self):  # noqa: ANN001
        rows = _rows(self)
        if rows is None:
            return self._CursorWrapper__c.fetchone()
        return fetchmany(self, 1)[0] if rows else None

    def description(self):  # noqa: ANN001
        if getattr(self, "_flowlake_description", None) is not None:
            return self._flowlake_description
        return self._CursorWrapper__c.description

    def set_description(self, value):  # noqa: ANN001 - Superset's fetch_data puts it back
        self._flowlake_description = value

    cursor_cls.execute = retrying_execute
    cursor_cls.fetchall, cursor_cls.fetchmany, cursor_cls.fetchone = fetchall, fetchmany, fetchone
    cursor_cls.description = property(description, set_description)
    cursor_cls._flowlake_retry = True


_retry_swapped_reads()
