"""Every dashboard in a real browser: Debian chromium driven by Playwright.

Logs in through the login page, opens each dashboard, waits for every chart, and
asserts none shows an error and each renders data. Screenshots go to test-output/ (and,
with FLOWLAKE_DOCS_SCREENSHOTS=DIR, to DIR/<slug>.png for the docs: make docs-screenshots);
each dashboard's full render time is printed (not asserted: the 2-CPU CI box is shared),
after `flowlake superset warm` filled Superset's data cache as the nightly jobs do.
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from datetime import timezone
from pathlib import Path

import pytest

from flowlake import superset_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from superset_lake import superset_up  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output"
CHROMIUM = superset_cli.CHROMIUM
ARGS = superset_cli.CHROMIUM_ARGS
ALL_CHARTS_SETTLED = superset_cli.ALL_CHARTS_SETTLED  # every chart drawn or showing an error

# What each chart holder shows: errors, canvases (ECharts), table rows, text.
INSPECT = """e => ({
  title: (e.querySelector('[data-test="editable-title"]') || e).innerText.trim(),
  errors: Array.from(e.querySelectorAll('[role="alert"], .ant-alert-error, [data-test="chart-error"]')).map(x => x.innerText.slice(0, 200)),
  canvases: Array.from(e.querySelectorAll('canvas')).filter(c => c.width > 0 && c.height > 0).length,
  rows: e.querySelectorAll('table tbody tr').length,
  text: e.innerText,
  // how far a table reaches past its chart (> 0: columns hidden behind a scroll bar)
  overflow: (t => t ? Math.round(t.getBoundingClientRect().right - e.getBoundingClientRect().right) : 0)(e.querySelector('table')),
})"""


@pytest.fixture(scope="module")
def superset(cfg, request):
    # One Superset for the whole run (both Superset test modules); stopped at session end.
    return superset_up(cfg, request.config)


@pytest.fixture(scope="module")
def page(superset):
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing: apt-get install chromium (make setup)")
    creds = superset["creds"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1600, "height": 1200})
        # Every URL the page asked for, and those the content security policy refused
        # (the browser never sent those).
        pg.requested, pg.refused = [], []
        pg.on("request", lambda r: pg.requested.append(r.url))
        pg.on("requestfailed", lambda r: r.failure == "csp" and pg.refused.append(r.url))
        superset_cli.browser_login(pg, creds)  # through the login page's form
        yield pg
        browser.close()


@pytest.mark.integration
def test_warm_opens_every_dashboard(superset, cfg):
    """`flowlake superset warm` (run after the jobs, and by `flowlake demo`): every
    provisioned dashboard rendered once, so their queries sit in the data cache. Runs
    first, so the render times below are what an operator sees after the nightly jobs."""
    import subprocess

    res = subprocess.run([str(REPO / ".venv" / "bin" / "flowlake"), "superset", "warm"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    for slug in superset["provision"]["dashboards"]:
        assert f"{slug}: rendered in" in res.stdout, res.stdout
    assert any(cfg.path("superset", "cache", "data").iterdir())


@pytest.mark.integration
def test_jobs_run_refills_the_emptied_cache(superset, cfg):
    """`flowlake jobs run` ends by refilling the chart cache the jobs just invalidated,
    when this home's Superset is up (as here), so the morning's first visitor gets cached
    dashboards; without a provisioned Superset it does nothing."""
    import io

    from rich.console import Console

    from flowlake.superset_cli import refill_cache

    cache = cfg.path("superset", "cache", "data")
    for f in cache.iterdir():
        f.unlink()
    out = io.StringIO()
    refill_cache(cfg, Console(file=out, width=200))
    assert "chart cache refilled: daily-operations" in out.getvalue(), out.getvalue()
    assert "not every chart" not in out.getvalue()
    assert any(cache.iterdir())

    class Elsewhere:  # another home: nothing provisioned, nothing to do
        def path(self, *parts):
            return cfg.path("not-here", *parts)

        def __getattr__(self, name):
            return getattr(cfg, name)

    out = io.StringIO()
    refill_cache(Elsewhere(), Console(file=out, width=200))
    assert out.getvalue() == ""


@pytest.mark.integration
@pytest.mark.browser
@pytest.mark.parametrize("slug", ["daily-operations", "flow-sizes", "active-vs-passive", "capacity", "collection",
                                  "pinger-regions", "behaviour-classes", "experiments", "border",
                                  "traffic-by-network", "alerts", "attacks"])
def test_dashboard_renders_every_chart(page, superset, slug, figure):
    expected = superset["provision"]["dashboards"][slug]
    page.requested.clear()
    page.refused.clear()
    url = f"{superset['creds']['url']}/superset/dashboard/{slug}/"

    def load() -> float:
        """Seconds from navigation until every chart has settled."""
        t0 = time.monotonic()
        page.goto(url)
        page.wait_for_function(ALL_CHARTS_SETTLED, timeout=180_000, polling=100)
        return time.monotonic() - t0

    elapsed = load()
    OUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUT / f"superset-{slug}.png"), full_page=True)
    if os.environ.get("FLOWLAKE_DOCS_SCREENSHOTS"):  # docs/dashboards.md shows it (make docs-screenshots)
        docs_dir = Path(os.environ["FLOWLAKE_DOCS_SCREENSHOTS"])
        docs_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(OUT / f"superset-{slug}.png", docs_dir / f"{slug}.png")
    # page loads with the dashboard's scripts in the browser's cache, as for a returning operator
    again = [load() for _ in range(3)]
    figure(f"dashboard {slug}: {len(expected)} charts rendered in {elapsed:.2f} s (first visit of this browser); "
           f"next 3 page loads {statistics.median(again):.2f} s median ({min(again):.2f}-{max(again):.2f})")

    holders = page.locator('[data-test="dashboard-component-chart-holder"]')
    charts = [holders.nth(i).evaluate(INSPECT) for i in range(holders.count())]
    assert sorted(c["title"] for c in charts) == sorted(expected)
    for c in charts:
        assert not c["errors"], f"{slug} / {c['title']}: {c['errors']}"
        assert "No results" not in c["text"], f"{slug} / {c['title']}: no data"
        body = c["text"].replace(c["title"], "", 1)
        assert c["canvases"] or c["rows"] or any(ch.isdigit() for ch in body), \
            f"{slug} / {c['title']}: nothing rendered"
        # at 1600 px every table shows all its columns (a verdict column once hid off-chart)
        assert c["overflow"] <= 0, f"{slug} / {c['title']}: table {c['overflow']} px wider than its chart"
    # Nothing leaves the host: no telemetry pixel, fonts or tiles from outside.
    base = superset["creds"]["url"]
    outside = sorted({u for u in page.requested if not u.startswith((base + "/", "data:", "blob:"))}
                     - set(page.refused))
    assert not outside, f"{slug}: the browser asked outside hosts for {outside}"


def si(v: float, digits: int = 4) -> str:
    """d3's ".4s" as the report tables' template writes it (sprintf %.4g, SI prefix)."""
    for e, prefix in ((12, "T"), (9, "G"), (6, "M"), (3, "k")):
        if abs(v) >= 10 ** e:
            return f"{float(f'{v / 10 ** e:.{digits}g}'):g}{prefix}"
    return f"{float(f'{v:.{digits}g}'):g}"


TABLE_TEXT = """e => { const t = e.querySelector('table');
  return [Array.from(t.querySelectorAll('thead th')).map(x => x.innerText.trim()),
          Array.from(t.querySelectorAll('tbody tr')).map(r => Array.from(r.cells).map(x => x.innerText.trim()))]; }"""


@pytest.mark.integration
@pytest.mark.browser
def test_report_tables_show_the_lake_formatted(page, superset, cfg):
    """What the operator reads: the Totals table shows the day's totals from the lake,
    with SI prefixes; Largest flows shows the biggest flow's start in UTC, to the second."""
    import pyarrow.dataset as pads

    def read(table):
        return pads.dataset(str(cfg.lake / "reports" / table), format="parquet",
                            partitioning="hive").to_table().to_pylist()

    page.goto(f"{superset['creds']['url']}/superset/dashboard/daily-operations/")
    page.wait_for_function(ALL_CHARTS_SETTLED, timeout=180_000, polling=100)
    holder = {h.evaluate(INSPECT)["title"]: h for h in page.locator('[data-test="dashboard-component-chart-holder"]').all()}

    day = [r for r in read("traffic_totals") if r["hour"] is None and r["direction"] == "all"]
    head, rows = holder["Totals"].evaluate(TABLE_TEXT)
    shown = dict(zip(head, rows[0]))
    for key in ("bytes", "flows", "packets"):
        assert shown[key] == si(sum(r[key] for r in day if r["exporter"] != "all")), (key, shown)

    head, rows = holder["Largest flows"].evaluate(TABLE_TEXT)
    first = dict(zip(head, rows[0]))
    flows = [r for r in read("largest_flows") if r["direction"] == "all"]  # the filter's default
    most = max(r["bytes"] for r in flows)
    assert first["bytes"] == si(most), (first, most)
    starts = {r["time_start"].astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S") for r in flows if r["bytes"] == most}
    assert first["time_start"][:19] in starts, (first, starts)


@pytest.mark.integration
@pytest.mark.browser
def test_collection_shows_every_exporter_and_flags_the_silent(page, superset, cfg):
    """The Collection dashboard's "Exporters now": one row per export process in the lake's
    exporter_health (address, observation domain, version), its latest interval's sequence
    failures, and SILENT: the demo lake's last flows are days old, beyond
    health.silent_after_seconds."""
    import pyarrow.dataset as pads

    rows = pads.dataset(str(cfg.lake / "exporter_health"), format="parquet", partitioning="hive").to_table().to_pylist()
    latest = {}
    for r in sorted(rows, key=lambda r: r["interval_end"]):
        latest[(r["exporter"], str(r["observation_domain"]), str(r["version"]))] = r
    page.goto(f"{superset['creds']['url']}/superset/dashboard/collection/")
    page.wait_for_function(ALL_CHARTS_SETTLED, timeout=180_000, polling=100)
    holder = {h.evaluate(INSPECT)["title"]: h for h in page.locator('[data-test="dashboard-component-chart-holder"]').all()}
    head, shown = holder["Exporters now"].evaluate(TABLE_TEXT)
    shown = [dict(zip(head, r)) for r in shown]
    assert {(r["exporter"], r["domain"], r["ver"]) for r in shown} == set(latest)
    for r in shown:
        assert r["state"] == "SILENT", r
        want = latest[(r["exporter"], r["domain"], r["ver"])]
        assert r["seq_fail"] == str(want["sequence_failures"]), (r, want)
        assert int(r["seq_total"]) == sum(x["sequence_failures"] for x in rows
                                          if (x["exporter"], x["observation_domain"], x["version"]) == (
                                              want["exporter"], want["observation_domain"], want["version"]))


@pytest.mark.integration
@pytest.mark.browser
def test_collection_shows_sflow_agents_drops_per_agent(page, superset, cfg):
    """The Collection dashboard's "sFlow agents" (lake/sflow_agent_health, issue 35): one row
    per agent and sub-agent, its datagrams lost, restarts and bad input summed over the lake's
    rows exactly (the shown rows: the table keeps the 200 with the most datagrams)."""
    import pyarrow.dataset as pads

    rows = pads.dataset(str(cfg.lake / "sflow_agent_health"), format="parquet",
                        partitioning="hive").to_table().to_pylist()
    sums: dict = {}
    for r in rows:
        s = sums.setdefault((r["agent"], str(r["sub_agent"])), {"lost": 0, "restarts": 0, "bad": 0})
        for k in s:
            s[k] += r[k]
    page.goto(f"{superset['creds']['url']}/superset/dashboard/collection/")
    page.wait_for_function(ALL_CHARTS_SETTLED, timeout=180_000, polling=100)
    holder = {h.evaluate(INSPECT)["title"]: h for h in page.locator('[data-test="dashboard-component-chart-holder"]').all()}
    head, shown = holder["sFlow agents"].evaluate(TABLE_TEXT)
    shown = [dict(zip(head, r)) for r in shown]
    assert shown and len(shown) == min(200, len(sums)), (len(shown), len(sums))
    for r in shown:
        want = sums[(r["agent"], r["sub_agent"])]
        assert (int(r["lost"]), int(r["restarts"]), int(r["bad input"])) == (
            want["lost"], want["restarts"], want["bad"]), (r, want)


@pytest.mark.integration
@pytest.mark.browser
def test_pinger_regions_show_the_newest_month(page, superset, cfg):
    """The PingER dashboard opens on the newest month of the lake's matrices (the month
    picker's first value): the table lists exactly that month's cells as of its newest
    report date, and each heat map draws."""
    import pyarrow.dataset as pads

    rows = pads.dataset(str(cfg.lake / "reports" / "pinger_matrix"), format="parquet",
                        partitioning="hive").to_table().to_pylist()
    monthly = [r for r in rows if r["period"] == "month"]
    newest_month = max(r["month"] for r in monthly)
    newest_date = max(str(r["date"]) for r in monthly if r["month"] == newest_month)
    want = sorted((r["src_region"], r["dst_region"], f"{r['loss_pct']:.2f}") for r in monthly
                  if r["month"] == newest_month and str(r["date"]) == newest_date)
    page.goto(f"{superset['creds']['url']}/superset/dashboard/pinger-regions/")
    page.wait_for_function(ALL_CHARTS_SETTLED, timeout=180_000, polling=100)
    holder = {h.evaluate(INSPECT)["title"]: h for h in page.locator('[data-test="dashboard-component-chart-holder"]').all()}
    head, shown = holder["Region pairs this month"].evaluate(TABLE_TEXT)
    shown = [dict(zip(head, r)) for r in shown]
    assert {r["month"] for r in shown} == {newest_month}
    assert sorted((r["src_region"], r["dst_region"], r["loss_pct"]) for r in shown) == want
    for title in ("Loss band (0 = excellent)", "RTT band (0 = White)", "IPDV band (0 = good)"):
        assert holder[title].evaluate(INSPECT)["canvases"], f"heat map {title!r} drew nothing"


@pytest.mark.integration
@pytest.mark.browser
def test_alerts_dashboard_lists_the_open_alerts(page, superset, cfg):
    """The Alerts dashboard's "Open alerts": the lake's alerts that are not resolved, most
    recently updated first, whatever the time filter (an alert open for days stays listed)."""
    import pyarrow.dataset as pads

    rows = pads.dataset(str(cfg.lake / "alerts"), format="parquet", partitioning="hive").to_table().to_pylist()
    still_open = [r for r in rows if r["state"] != "resolved"]
    open_ids = {r["id"] for r in still_open}
    page.goto(f"{superset['creds']['url']}/superset/dashboard/alerts/")
    page.wait_for_function(ALL_CHARTS_SETTLED, timeout=180_000, polling=100)
    holder = {h.evaluate(INSPECT)["title"]: h for h in page.locator('[data-test="dashboard-component-chart-holder"]').all()}
    head, shown = holder["Open alerts"].evaluate(TABLE_TEXT)
    shown = [dict(zip(head, r)) for r in shown]
    assert len(shown) == min(500, len(still_open)) and {r["id"] for r in shown} <= open_ids
    assert {r["state"] for r in shown} <= {"open", "acknowledged", "snoozed"}
    assert [r["updated"] for r in shown] == sorted((r["updated"] for r in shown), reverse=True)


@pytest.mark.integration
@pytest.mark.browser
def test_dashboards_open_from_the_dashboard_list(page, superset, figure):
    """How operators move around: log in once, pick each dashboard from the list; the
    app navigates in place (no page load, so no second start of Superset's scripts).
    Every chart must settle; the render time is printed (not asserted)."""
    base = superset["creds"]["url"]
    page.goto(f"{base}/dashboard/list/")
    page.evaluate("window.__sameDocument = true")
    for slug, charts in superset["provision"]["dashboards"].items():
        link = page.locator(f'a[href$="/superset/dashboard/{slug}/"]').first
        link.wait_for(timeout=60_000)
        t0 = time.monotonic()
        link.click()
        page.wait_for_function(ALL_CHARTS_SETTLED, timeout=180_000, polling=100)
        elapsed = time.monotonic() - t0
        assert page.evaluate("window.__sameDocument === true"), f"{slug}: opening it reloaded the page"
        assert page.locator('[data-test="dashboard-component-chart-holder"]').count() == len(charts)
        figure(f"dashboard {slug} from the list: {len(charts)} charts rendered in {elapsed:.2f} s")
        page.go_back()


@pytest.mark.integration
@pytest.mark.browser
def test_superset_log_has_no_warnings(page, superset, cfg):
    """After the REST and browser tests above, Superset's log holds nothing to alarm an
    operator: no warning, error or traceback (it once logged a missing spinner on every
    page and a CSP warning at every start)."""
    html = page.request.get(superset["creds"]["url"] + "/superset/welcome/").text()
    assert "<svg" in html.split('id="app"', 1)[1], "no spinner shown while Superset's scripts load"
    log = cfg.path("log") / "superset.log"
    alarming = [line for line in log.read_text(errors="replace").splitlines()
                if any(f":{level}:" in line for level in ("WARNING", "ERROR", "CRITICAL")) or "Traceback" in line]
    assert alarming == [], f"{log}:\n" + "\n".join(alarming[:20])


@pytest.mark.integration
@pytest.mark.browser
def test_capacity_shows_snmp_utilisation_and_flow_coverage(page, superset, cfg):
    """The SNMP counters on the Capacity dashboard, as the interface_capacity job wrote them
    over the demo's counters: each interface's coverage of the day (the demo's half-covered
    interface reads 0.50, the others 0.97) and its daily 95th-percentile utilisation."""
    import pyarrow.dataset as pads

    def read(table):
        return pads.dataset(str(cfg.lake / "reports" / table), format="parquet",
                            partitioning="hive").to_table().to_pylist()

    def label(r):
        return f"{r['exporter']} if{r['if_index']}" + (f" {r['if_name']}" if r["if_name"] else "") + f" {r['side']}"

    page.goto(f"{superset['creds']['url']}/superset/dashboard/capacity/")
    page.wait_for_function(ALL_CHARTS_SETTLED, timeout=180_000, polling=100)
    holder = {h.evaluate(INSPECT)["title"]: h for h in page.locator('[data-test="dashboard-component-chart-holder"]').all()}

    want: dict[str, float] = {}
    for r in read("flow_coverage"):
        if r["hour"] is None and r["counter_bytes"] > 0:
            want[label(r)] = min(want.get(label(r), 9.0), r["coverage"])
    head, rows = holder["Flow coverage per interface (day)"].evaluate(TABLE_TEXT)
    shown = {row[head.index("interface")]: row[head.index("coverage")] for row in rows}
    assert shown == {k: f"{v:.2f}" for k, v in want.items()}
    assert shown["192.0.2.2 if2 xe-0/0/2 in"] == "0.50" and shown["192.0.2.1 if1 xe-0/0/1 in"] == "0.97"

    p95: dict[str, float] = {}
    for r in read("interface_utilisation"):
        if r["period"] == "1d":
            p95[label(r)] = max(p95.get(label(r), 0.0), r["p95_utilisation"])
    head, rows = holder["SNMP counters - daily peak and 95th percentile per interface"].evaluate(TABLE_TEXT)
    shown = {row[head.index("interface")]: row[head.index("p95 utilisation")] for row in rows}
    assert shown == {k: f"{v * 100:.1f}%" for k, v in p95.items()}
