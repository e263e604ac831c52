"""What a new user sees after `make demo`: `flowlake demo` itself (the same command, the
same data preparation: demo site, a week of history, the day, hour close, the jobs,
Superset provisioned and started) at a smaller volume in a private home, then every
dashboard in Debian chromium. Every chart must show data ("No results" fails) and the
largest value of a chart split by a dimension must be a known one: "(unknown)" (no MMDB,
no networks file, no interface rules) or an "unknown" PingER region fails.

The largest value is read from the chart's own query, as the dashboard asked Superset for
it (/api/v1/chart/data): the row with the largest first metric of a table or bar chart,
the series with the largest sum of a chart over time.
FLOWLAKE_DEMO_SUMMARY=FILE (the JSON `flowlake demo` printed) checks a demo already run
(e.g. `make demo`'s full day) instead of running a small one.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from flowlake import superset_cli
from flowlake.base import config as _config
from flowlake.base.ports import private_env

pytestmark = [pytest.mark.integration, pytest.mark.browser]

REPO = Path(__file__).resolve().parents[2]
FLOWLAKE = str(REPO / ".venv" / "bin" / "flowlake")
OUT = REPO / "test-output"
# Smaller than `make demo` (1M flows, 20k a history day), same command and code path.
FLOWS, HISTORY_FLOWS = 60_000, 3_000
UNKNOWN = ("(unknown)", "unknown")
# What the demo does not show yet, by dashboard (issue 37): these charts must still show "No
# results" (the day a change fills one, this test fails: take it out of here).
# - experiments: no `flowlake lab run` (root, network namespaces, minutes per study).
# - peering: the demo's routers send no BMP (no gobgpd per modelled router yet), so no flow
#   carries an AS path; only the origin AS (from the demo MMDB) and interface providers show.
# - attacks: the demo's NTP amplification is over (its attack closed, the mitigation a dry
#   run) before anyone opens the dashboard; the closed attack and the decision show.
KNOWN_GAPS = {
    "experiments": "every chart",
    "peering": {"Traffic by neighbour AS (bytes, whole day)", "Traffic by transit provider (bytes, whole day)",
                "Traffic by community (whole day)", "Share of traffic per exit path (whole day)",
                "Peering candidates: destination ASes reached through transit"},
    "attacks": {"Open attacks", "Mitigations in force"},
}

HOLDERS = """() => Array.from(document.querySelectorAll('[data-test="dashboard-component-chart-holder"]')).map(e => ({
  title: (e.querySelector('[data-test="editable-title"]') || e).innerText.trim(),
  errors: Array.from(e.querySelectorAll('[role="alert"], .ant-alert-error, [data-test="chart-error"]'))
    .map(x => x.innerText.slice(0, 200)),
  text: e.innerText}))"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory, request):
    given = os.environ.get("FLOWLAKE_DEMO_SUMMARY")  # a finished `make demo`'s summary (JSON file): look at it
    if given:
        summary = json.loads(Path(given).read_text())
        cfg = _config.load(summary["config"])
        return {"cfg": cfg, "summary": summary, "creds": superset_cli.credentials(cfg)}
    home = tmp_path_factory.mktemp("demo-home")
    env = {k: v for k, v in os.environ.items() if k != "FLOWLAKE_CONFIG"}
    env.update(private_env(home))
    # the demo answers reverse DNS itself (its dnsmasq on [rdns] port): not the private env's 2 s
    # budget for stacks with no resolver, under which the day's unnamed tail outweighed every domain
    for key in ("FLOWLAKE_RDNS_BUDGET_SECONDS", "FLOWLAKE_RDNS_TIMEOUT_SECONDS"):
        env.pop(key)

    def down():
        subprocess.run([FLOWLAKE, "down"], env=env, cwd=REPO, capture_output=True, timeout=300)
    request.addfinalizer(down)
    res = subprocess.run([FLOWLAKE, "demo", "--flows", str(FLOWS), "--history-flows", str(HISTORY_FLOWS)],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=3600)
    (OUT.mkdir(exist_ok=True), (OUT / "demo-dashboards.log").write_text(res.stdout + res.stderr))
    assert res.returncode == 0, res.stderr[-4000:]
    summary = json.loads(res.stdout[res.stdout.index("{"):res.stdout.rindex("}") + 1])
    cfg = _config.load(summary["config"], env=env)
    return {"cfg": cfg, "summary": summary, "creds": superset_cli.credentials(cfg)}


def largest(result: dict) -> tuple[str, ...] | None:
    """The labels of a chart query's largest value (None: nothing split by a dimension)."""
    names, types, rows = result.get("colnames") or [], result.get("coltypes") or [], result.get("data") or []
    if not rows:
        return None
    text = [n for n, t in zip(names, types, strict=True) if t == 1]
    numbers = [n for n, t in zip(names, types, strict=True) if t == 0]
    if text and numbers:  # a table, bar chart or heat map: one row per value
        top = max(rows, key=lambda r: r[numbers[0]] if isinstance(r[numbers[0]], (int, float)) else float("-inf"))
        return tuple(str(top[n]) for n in text)
    if len(numbers) > 1 and any(t == 2 for t in types):  # over time, pivoted: one column per series
        sums = {n: sum(r[n] or 0 for r in rows if isinstance(r[n], (int, float))) for n in numbers}
        return (max(sums, key=sums.get),)
    return None


def test_demo_summary(demo):
    s = demo["summary"]
    assert s["history_days"] == 7 and s["config"].endswith("demo/site/flowlake.toml"), s
    assert s["nfcapd_received"] >= 0.999 * s["flows_sent"] and s["biflows"] > 0, s
    assert s["nfcapd_received"] + s["biflows"] >= s["lake_rows"] >= s["nfcapd_received"], s
    assert s["superset"], s


@pytest.mark.parametrize("slug", ["daily-operations", "flow-sizes", "active-vs-passive", "capacity", "collection",
                                  "pinger-regions", "behaviour-classes", "experiments", "border",
                                  "traffic-by-network", "alerts", "attacks", "peering"])
def test_demo_dashboard_shows_data(demo, slug):
    from playwright.sync_api import sync_playwright  # noqa: PLC0415  (start-up: playwright, browser tests only)

    if not Path(superset_cli.CHROMIUM).exists():
        pytest.fail(f"{superset_cli.CHROMIUM} missing: apt-get install chromium (make setup)")
    creds = demo["creds"]
    answers: list = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=superset_cli.CHROMIUM, args=superset_cli.CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1200})
        superset_cli.browser_login(page, creds)

        def on_response(r):
            if "/api/v1/chart/data" in r.url and r.request.method == "POST":
                try:
                    answers.append((json.loads(r.request.post_data or "{}"), r.json()))
                except Exception as exc:  # noqa: BLE001  (a body the browser no longer holds: named below)
                    answers.append(({}, {"error": str(exc)}))
        page.on("response", on_response)
        page.goto(f"{creds['url']}/superset/dashboard/{slug}/")
        page.wait_for_function(superset_cli.ALL_CHARTS_SETTLED, timeout=300_000, polling=200)
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(OUT / f"demo-{slug}.png"), full_page=True)
        charts = page.evaluate(HOLDERS)
        titles = {}
        for form, _ in answers:
            sid = (form.get("form_data") or {}).get("slice_id")
            if sid is not None and sid not in titles:
                titles[sid] = page.request.get(f"{creds['url']}/api/v1/chart/{sid}").json()["result"]["slice_name"]
        browser.close()
    assert charts, f"{slug}: no charts"
    problems, gaps = [], KNOWN_GAPS.get(slug, set())
    for c in charts:
        gap = gaps == "every chart" or c["title"] in gaps
        if c["errors"]:
            problems.append(f"{c['title']}: {c['errors']}")
        if ("No results" in c["text"]) != gap:
            problems.append(f"{c['title']}: " + ("a known gap shows data now: take it out of KNOWN_GAPS" if gap
                                                 else "No results"))
    for form, body in answers:
        title = titles.get((form.get("form_data") or {}).get("slice_id"), "?")
        for result in body.get("result") or []:
            top = largest(result)
            if top is not None and any(v in UNKNOWN or v.endswith("(unknown)") for v in top):
                problems.append(f"{title}: largest value {top}")
    assert not problems, f"{slug} on the demo's data:\n" + "\n".join(problems)
