"""A process by pid and start time (from /proc): the same process, or a reused pid."""
from __future__ import annotations

from pathlib import Path


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) of a process, None if none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state is field 3
    return fields[0], int(fields[19])               # starttime is field 22


def process_start(pid: int) -> int | None:
    st = _stat(pid)
    return st[1] if st else None


def alive(pid: int, started: int | None = None) -> bool:
    """The process `pid` runs (not a zombie) and, if `started` is given, is the same one."""
    st = _stat(pid)
    return st is not None and st[0] != "Z" and (started is None or st[1] == started)
