"""A small real filesystem for disk-guard tests: a size-limited tmpfs mounted on a folder
(root only), and ballast that fills it to a chosen level."""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from needs import require_root


@contextlib.contextmanager
def tmpfs(path: Path, size_mb: int):
    require_root("mounting a size-limited tmpfs for the disk-guard tests")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        # lazy: a process we failed to stop must not leave the mount behind
        subprocess.run(["umount", "-l", str(path)], check=False)


def usage(path: Path) -> tuple[int, int]:
    """(used, used + available) bytes, as df and the disk guard count them."""
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    return used, used + st.f_bavail * st.f_frsize


def fill_to(path: Path, ballast: Path, used_pct: float) -> int:
    """Grow or shrink the ballast file so the filesystem stands at used_pct; its size."""
    have = ballast.stat().st_size if ballast.exists() else 0
    used, total = usage(path)
    want = max(0, have + int(used_pct / 100 * total) - used)
    with open(ballast, "wb") as fh:
        fh.truncate(0)
        chunk = b"\xa5" * (1 << 20)
        left = want
        while left > 0:
            left -= fh.write(chunk[:min(left, len(chunk))])
        fh.flush()
        os.fsync(fh.fileno())
    return want
