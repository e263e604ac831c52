"""Parsed configuration files kept between commands, in the user's own cache folder.

Why: every `flowlake` command reads flowlake.toml; importing tomllib and parsing ~400
lines cost a quick `flowlake query` ~5 ms of CPU (bench/query.py), a fiftieth of nfdump's
whole answer. The parsed tables are stored with marshal (no import, C speed) under
$XDG_CACHE_HOME/flowlake (~/.cache/flowlake, mode 700, ours only), one file per config
file, replaced when the file's size or mtime changes; the MAX_FILES most recently written
are kept. A file changed in the last RACY_SECONDS is neither cached nor read from the cache
(git's "racy clean" rule): a rewrite of the same size inside one filesystem clock tick keeps
its mtime, so size and mtime vouch for a file only once it has been still for a while (the bound: tests and scripts read many short-lived config files). A cache that
cannot be read or written is ignored: the file is parsed.
"""
from __future__ import annotations

import marshal
import os
import time
from pathlib import Path

PREFIX = "toml-"
MAX_FILES = 8
RACY_SECONDS = 2


def folder() -> Path | None:
    """The user's cache folder for flowlake, created private; None when unusable."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flowlake"
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        if base.stat().st_uid != os.getuid():
            return None
    except (OSError, RuntimeError):  # RuntimeError: no home directory
        return None
    return base


def _entry(path: Path) -> tuple[Path | None, str]:
    """(cache file, key) of a config file; the key changes with the file."""
    path = Path(path).resolve()
    st = path.stat()
    base = folder()
    name = PREFIX + str(path).strip("/").replace("/", "%") + ".marshal"
    if base is None or len(name) > 250 or time.time_ns() - st.st_mtime_ns < RACY_SECONDS * 1_000_000_000:
        return None, ""
    return base / name, f"{path}\0{st.st_size}\0{st.st_mtime_ns}"


def get(path: Path) -> dict | None:
    """The parsed file, when cached for its current size and mtime."""
    try:
        cache, key = _entry(path)
        if cache is None:
            return None
        with open(cache, "rb") as fh:
            stored_key, data = marshal.load(fh)
        return data if stored_key == key and isinstance(data, dict) else None
    except (OSError, ValueError, EOFError, TypeError):
        return None


def put(path: Path, data: dict) -> None:
    """Store a parsed file (values marshal cannot hold, e.g. TOML dates: not cached)."""
    try:
        cache, key = _entry(path)
        if cache is None:
            return
        blob = marshal.dumps((key, data))
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
        with open(tmp, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, cache)
        kept = sorted(cache.parent.glob(f"{PREFIX}*.marshal"), key=lambda f: f.stat().st_mtime_ns, reverse=True)
        for old in kept[MAX_FILES:]:
            old.unlink(missing_ok=True)
    except (OSError, ValueError):
        return


def status() -> dict:
    """For `flowlake status`: the cache folder and its size."""
    base = folder()
    files = [f for f in base.iterdir() if f.is_file()] if base is not None else []
    return {"cache_dir": str(base) if base else None, "cache_files": len(files),
            "cache_bytes": sum(f.stat().st_size for f in files)}
