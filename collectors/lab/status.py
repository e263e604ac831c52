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
    from flowlake.pipelines.lab_tag import registry_path

    reg = registry_path(cfg)
    last["registry_bytes"] = reg.stat().st_size if reg.exists() else 0
    last["line"] = (f"lab: last study {last['study']} at {when}: {last['done']} runs done, {last['skipped']} skipped, "
                    f"{last['pending']} pending of {last['runs']}; run registry {last['registry_bytes']:,} bytes "
                    f"(kept {cfg.lab.registry_days} days)"
                    + (f"; {last['recovered']} runs' markers taken back from the ledger (published before a stop)"
                       if last.get("recovered") else ""))
    return last
