"""Named fault-injection points (`point(name)`), compiled into the stages so the fault
harness (flowlake/faults.py) and the tests can stop a process at the one moment a random
kill rarely hits. Base layer: every stage may call it; it imports only the standard library."""
from __future__ import annotations

import os
import signal
import time

_hits: dict[str, int] = {}


def point(name: str) -> None:
    """A named fault-injection point, for the one moment a random kill rarely hits.
    With FLOWLAKE_FAULT=name in the environment the process signals itself here, after
    FLOWLAKE_FAULT_AFTER earlier hits (default 0) went by: SIGTERM (a stop: `finally`
    blocks run), or SIGKILL with FLOWLAKE_FAULT=name:KILL (a crash). A no-op otherwise."""
    want, _, how = os.environ.get("FLOWLAKE_FAULT", "").partition(":")
    if want != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] > int(os.environ.get("FLOWLAKE_FAULT_AFTER", "0")):
        os.kill(os.getpid(), signal.SIGKILL if how.upper() == "KILL" else signal.SIGTERM)
        time.sleep(5)  # the signal is delivered before this returns
