"""The lab's line in `flowlake status`: the last study run, its runs done and pending."""
from __future__ import annotations

import datetime as dt
import json

from .leftovers import status as leftovers


def status(cfg) -> dict:
    """{} when no lab ran in this home and none left namespaces; else the last summary,
    what killed labs left, and a line for humans."""
    left = leftovers(cfg)
    gone = left["leftover_namespaces"] + left["unrecorded_namespaces"]
    warn = (f"; LEFT BY KILLED LABS: {len(gone)} namespaces ({', '.join(gone)}): `flowlake lab clean`"
            + (" --unrecorded" if left["unrecorded_namespaces"] else "") + " removes them") if gone else ""
    path = cfg.path("state", "lab", "last.json")
    try:
        last = json.loads(path.read_text())
    except (OSError, ValueError):
        return {**left, "line": "lab: no study finished in this home" + warn} if gone or left["leftover_labs"] else {}
    last.update(left)
    when = dt.datetime.fromtimestamp(last["at"], dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    from flowlake.collectors.lab.tag import registry_path  # noqa: PLC0415  (start-up: flowlake status)

    reg = registry_path(cfg)
    last["registry_bytes"] = reg.stat().st_size if reg.exists() else 0
    last["line"] = (f"lab: last study {last['study']} at {when}: {last['done']} runs done, {last['skipped']} skipped, "
                    f"{last['pending']} pending of {last['runs']}"
                    + (f", {last['unpublished']} not published (--no-publish: a `lab run` without it publishes them)"
                       if last.get("unpublished") else "") + f"; run registry {last['registry_bytes']:,} bytes "
                    f"(kept {cfg.lab.registry_days} days)"
                    + (f"; {last['recovered']} runs' markers taken back from the ledger (published before a stop)"
                       if last.get("recovered") else "") + warn)
    return last
