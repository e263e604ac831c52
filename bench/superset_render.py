"""Benchmark: full render time of each Superset dashboard in headless Chromium.

By default builds a scratch demo lake (tests/superset_lake.py: flows for two days,
--flows per day, plus every declared report table), starts its own Superset on free
ports under a scratch FLOWLAKE_HOME, provisions the dashboards, measures, and stops
it. With --home it measures the Superset of an existing FLOWLAKE_HOME instead (e.g.
the one `make demo` left running) and starts nothing.

Per dashboard and round, three figures (seconds from navigation to the last chart
settled, with the same predicate as tests/test_superset_browser.py):
  cold    fresh browser context (empty HTTP cache) and Superset's data cache emptied
          (own scratch home only; with --home the server cache is left alone)
  fresh   fresh browser context, Superset's data cache already filled
  warm    second visit in the same browser context
The machine's 1-minute load average is printed with every figure: on a shared 2-core
box the figures mean little without it.

    .venv/bin/python bench/superset_render.py                 # 200k flows a day, 3 rounds
    .venv/bin/python bench/superset_render.py --rounds 5 --trace daily-operations
    .venv/bin/python bench/superset_render.py --home var       # a running demo stack
    FLOWLAKE_SUPERSET_PORT=8089 .venv/bin/python bench/superset_render.py --home /tmp/h --clear-cache
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from flowlake.superset_cli import ALL_CHARTS_SETTLED, CHROMIUM, CHROMIUM_ARGS, browser_login as login  # noqa: E402
from test_superset_browser import INSPECT  # noqa: E402

SLUGS = ["daily-operations", "flow-sizes", "active-vs-passive", "capacity"]


def load() -> float:
    return os.getloadavg()[0]


RESOURCES = """() => performance.getEntriesByType('resource').map(e => [e.startTime, e.responseEnd, e.name])"""


def task_seconds(cdp) -> float:
    """CPU time the renderer's main thread spent on tasks for the current document
    (Chrome's TaskDuration metric; it starts from zero with each navigation)."""
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}["TaskDuration"]


def render(page, base: str, slug: str, trace: bool = False, cdp=None) -> float:
    t0 = time.monotonic()
    page.goto(f"{base}/superset/dashboard/{slug}/")
    page.wait_for_function(ALL_CHARTS_SETTLED, timeout=180_000, polling=50)
    elapsed = time.monotonic() - t0
    render.busy = task_seconds(cdp) if cdp else float("nan")
    if trace:  # the browser's own resource timing, ms from navigation start
        settled = page.evaluate("() => performance.now()")
        for start, end, url in sorted(page.evaluate(RESOURCES)):
            if "/static/" not in url:
                print(f"      {start:6.0f}-{end:6.0f} ms  {url.replace(base, '')[:100]}")
        print(f"      settled at {settled:.0f} ms")
    holders = page.locator('[data-test="dashboard-component-chart-holder"]')
    bad = [c["title"] for c in (holders.nth(i).evaluate(INSPECT) for i in range(holders.count())) if c["errors"]]
    if bad:
        print(f"  !! {slug}: charts with errors: {bad}")
    return elapsed


def clear_data_cache(home: Path) -> None:
    cache = home / "superset" / "cache" / "data"
    if cache.exists():
        for f in cache.iterdir():
            f.unlink()


def measure(creds, home: Path | None, rounds: int, slugs: list[str], trace: set[str]) -> dict:
    from playwright.sync_api import sync_playwright

    figures = {s: {k: [] for k in ("cold", "fresh", "warm", "cold busy", "fresh busy", "warm busy")} for s in slugs}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for r in range(rounds):
            for slug in slugs:
                row = {}
                kinds = (["cold"] if home is not None else []) + ["fresh", "warm"]
                ctx = None
                for kind in kinds:
                    if kind in ("cold", "fresh"):
                        if ctx is not None:
                            ctx.close()
                        ctx = browser.new_context(viewport={"width": 1600, "height": 1200})
                        page = ctx.new_page()
                        cdp = ctx.new_cdp_session(page)
                        cdp.send("Performance.enable")
                        login(page, creds)
                        if kind == "cold":
                            clear_data_cache(home)
                    la = load()
                    secs = render(page, creds["url"], slug, trace=slug in trace and r == 0, cdp=cdp)
                    figures[slug][kind].append((secs, la))
                    figures[slug][kind + " busy"].append((render.busy, la))
                    row[kind] = f"{secs:5.2f} s (load {la:4.2f}, browser busy {render.busy:4.2f} s)"
                ctx.close()
                print(f"round {r + 1} {slug:18} " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
        browser.close()
    return figures


def summary(figures: dict) -> None:
    print("\nper dashboard: median [min-max] seconds, with the load average at the measurements [min-max];")
    print("busy = CPU seconds of the page's main thread (varies less with the machine's load than render time)")
    for slug, kinds in figures.items():
        parts, busy = [], []
        for kind in ("cold", "fresh", "warm"):
            xs = kinds[kind]
            if not xs:
                continue
            secs, las = [x for x, _ in xs], [la for _, la in xs]
            parts.append(f"{kind} {statistics.median(secs):4.2f} [{min(secs):4.2f}-{max(secs):4.2f}] "
                         f"(load {min(las):.1f}-{max(las):.1f})")
            busy.append(f"{kind} {statistics.median(x for x, _ in kinds[kind + ' busy']):4.2f}")
        print(f"  {slug:18} " + "   ".join(parts) + "   busy: " + ", ".join(busy))


def scratch_stack(flows: int):
    """Scratch FLOWLAKE_HOME + demo lake + Superset; returns (home, creds, stop)."""
    from flowlake.services.ports import private_env

    home = Path(tempfile.mkdtemp(prefix="flowlake-bench-superset-"))
    os.environ.update(private_env(home))
    from flowlake import config, superset_cli
    from superset_lake import write_flows, write_reports

    config.reset()
    cfg = config.get()
    t0 = time.monotonic()
    n = write_flows(cfg.lake, flows_per_day=flows)
    tables = write_reports(cfg.lake)
    print(f"demo lake: {n} flows over 2 days, {len(tables)} report tables ({time.monotonic() - t0:.1f} s)")
    t0 = time.monotonic()
    superset_cli.start(cfg)
    result = superset_cli.provision(cfg)
    print(f"Superset started and provisioned in {time.monotonic() - t0:.1f} s: "
          + ", ".join(f"{k} {len(v)} charts" for k, v in result["dashboards"].items()))

    def stop():
        superset_cli.stop(cfg)
        shutil.rmtree(home, ignore_errors=True)

    return home, superset_cli.credentials(cfg), stop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flows", type=int, default=200_000, help="flows per demo day (scratch lake)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--home", type=Path, help="measure the running Superset of this FLOWLAKE_HOME; start nothing")
    ap.add_argument("--dashboard", action="append", metavar="SLUG", help="only these (repeatable; default: the four)")
    ap.add_argument("--trace", action="append", default=[], metavar="SLUG",
                    help="print the API requests of this dashboard's visits in round 1 (browser timing)")
    ap.add_argument("--clear-cache", action="store_true",
                    help="with --home: also measure cold visits, emptying that Superset's data cache first")
    ap.add_argument("--keep", action="store_true", help="leave the scratch Superset running (prints its home and port)")
    args = ap.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    stop = None
    if args.home:
        os.environ["FLOWLAKE_HOME"] = str(args.home.resolve())
        from flowlake import config, superset_cli

        config.reset()
        cfg = config.get()
        if not superset_cli.healthy(cfg):
            sys.exit(f"no Superset answering at {superset_cli.url(cfg)} for FLOWLAKE_HOME={args.home}")
        creds = superset_cli.credentials(cfg)
        home = args.home.resolve() if args.clear_cache else None
    else:
        home, creds, stop = scratch_stack(args.flows)
    try:
        figures = measure(creds, home, args.rounds, args.dashboard or SLUGS, set(args.trace))
        summary(figures)
    finally:
        if stop and not args.keep:
            stop()
        elif stop:
            print(f"scratch Superset left running: FLOWLAKE_HOME={home} "
                  f"FLOWLAKE_SUPERSET_PORT={os.environ['FLOWLAKE_SUPERSET_PORT']} ({creds['url']})")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
