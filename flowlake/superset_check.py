"""`flowlake superset check`: does every dashboard show data? Each chart's query is run
through Superset's REST API (as the dashboard runs it) and judged: failed (an error),
empty ("No results" on the dashboard), or led by "(unknown)" (its largest row names
nothing: enrichment missing, e.g. no MMDB, networks file or interface names). The demo
prints it after the reports; operators run it after changing the enrichment.
"""
from __future__ import annotations

import numbers

UNKNOWN = {"(unknown)", "unknown", "Unknown"}


def judge(result: dict) -> str | None:
    """One chart's data result (Superset's /api/v1/chart/<id>/data/ `result[0]`):
    None when it shows data, else "empty" or "unknown first" (the row with the largest
    metric names "(unknown)" in a dimension column)."""
    rows = result.get("data") or []
    if not rows or not result.get("rowcount", len(rows)):
        return "empty"
    names = result.get("colnames") or list(rows[0])
    # Superset returns the group-by columns first, the metrics after them: the last numeric one
    metric = next((c for c in reversed(names) if not c.startswith("__") and all(
        isinstance(r.get(c), numbers.Number) and not isinstance(r.get(c), bool) for r in rows)), None)
    if metric is None or len(rows) < 2:
        return None
    top = max(rows, key=lambda r: r[metric])
    if any(isinstance(v, str) and v.strip() in UNKNOWN for k, v in top.items() if k != metric):
        return "unknown first"
    return None


def _session(creds: dict):
    import requests  # noqa: PLC0415  (start-up: only this check talks REST)

    s = requests.Session()
    r = s.post(creds["url"] + "/api/v1/security/login", timeout=30,
               json={"username": creds["username"], "password": creds["password"], "provider": "db", "refresh": False})
    r.raise_for_status()
    s.headers["Authorization"] = "Bearer " + r.json()["access_token"]
    s.base = creds["url"]
    return s


def may_be_empty() -> set[tuple[str, str]]:
    """(dashboard, chart) titles whose "No results" is a state, not missing data
    (`may_be_empty: true` in superset/dashboards/*.yaml: no attack open)."""
    import yaml  # noqa: PLC0415  (start-up: only this check reads the dashboards' YAML)

    from flowlake.base.config import REPO_ROOT  # noqa: PLC0415

    out = set()
    for path in sorted((REPO_ROOT / "superset" / "dashboards").glob("*.yaml")):
        spec = yaml.safe_load(path.read_text()) or {}
        out |= {(spec.get("title"), c.get("title")) for c in spec.get("charts") or [] if c.get("may_be_empty")}
    return out


def check(creds: dict) -> dict:
    """Every chart of the Superset that creds ({"url", "username", "password"}: superset_cli.
    credentials) log in to: {"charts": n, "dashboards": {title: n}, "failed": [(dashboard,
    chart, why)], "empty": [(dashboard, chart)], "unknown_first": [(dashboard, chart)],
    "empty_by_state": [(dashboard, chart)] (may_be_empty charts with no rows: not counted)}."""
    s = _session(creds)
    out = {"charts": 0, "dashboards": {}, "failed": [], "empty": [], "unknown_first": [], "empty_by_state": []}
    state = may_be_empty()
    dashboards = s.get(s.base + "/api/v1/dashboard/?q=(page_size:100)", timeout=30).json()["result"]
    for d in sorted(dashboards, key=lambda d: d["dashboard_title"]):
        title = d["dashboard_title"]
        charts = s.get(f"{s.base}/api/v1/dashboard/{d['id']}/charts", timeout=30).json()["result"]
        out["dashboards"][title] = len(charts)
        for c in charts:
            out["charts"] += 1
            name = c["slice_name"]
            r = s.get(f"{s.base}/api/v1/chart/{c['id']}/data/", timeout=120)
            if r.status_code != 200:
                out["failed"].append((title, name, f"HTTP {r.status_code}: {r.text[:200]}"))
                continue
            verdict = judge(r.json()["result"][0])
            if verdict == "empty":
                out["empty_by_state" if (title, name) in state else "empty"].append((title, name))
            elif verdict:
                out["unknown_first"].append((title, name))
    return out


def print_check(console, res: dict) -> None:
    bad = len(res["failed"]) + len(res["empty"]) + len(res["unknown_first"])
    console.print(f"Superset: {res['charts']} charts on {len(res['dashboards'])} dashboards; "
                  + ("every one shows data" if not bad else f"[yellow]{bad} do not show data[/]"))
    for what, rows in (("failed", res["failed"]), ("no results", res["empty"]),
                       ("largest row '(unknown)'", res["unknown_first"])):
        for row in rows:
            console.print(f"  [yellow]{what}[/]: {row[0]} / {row[1]}" + (f": {row[2]}" if len(row) > 2 else ""))
    for row in res.get("empty_by_state", []):
        console.print(f"  no results, as it may be (nothing in that state now): {row[0]} / {row[1]}")
