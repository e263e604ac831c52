"""The lab's line in `flowlake status`: the last study run, its runs done and pending."""
from __future__ import annotations

import datetime as dt
import json


def status(cfg) -> dict:
    """{} when no lab ran in this home; else the last summary and a line for humans."""
    path = cfg.path("state", "lab", "last.json")
    try:
        last = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    when = dt.datetime.fromtimestamp(last["at"], dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    last["line"] = (f"lab: last study {last['study']} at {when}: {last['done']} runs done, {last['skipped']} skipped, "
                    f"{last['pending']} pending of {last['runs']}")
    return last
