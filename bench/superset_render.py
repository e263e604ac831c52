"""Benchmark: full render time of each Superset dashboard in headless Chromium.

By default builds a scratch demo lake (tests/superset_lake.py: flows for two days,
--flows per day, plus every declared report table), starts its own Superset on free
ports under a scratch FLOWLAKE_HOME, provisions the dashboards, measures, and stops
it. With --home it measures the Superset of an existing FLOWLAKE_HOME instead (e.g.
the one `make demo` left running) and starts nothing.

Per dashboard and round, three figures (seconds from navigation to the last chart
settled, with the same predicate as tests/hub/test_superset_browser.py):
  cold    fresh browser context (empty HTTP cache) and Superset's data cache emptied
          (own scratch home only; with --home the server cache is left alone)
  fresh   fresh browser context, Superset's data cache already filled
  warm    second visit in the same browser context (Chrome compiles Superset's scripts
          again and stores V8's code cache for them)
  again   third visit: the code cache is used, as in the browser of an operator who
          opens the dashboards every day
  list    picked from the dashboard list in that context, as an operator moves around:
          the app navigates in place, so Superset's scripts do not start again
The machine's 1-minute load average is printed with every figure: on a shared 2-core
box render times mean little without it. So is the CPU time each visit cost, in the
browser (our Chromium processes) and in Superset (gunicorn master and workers): that
hardly depends on the load and compares changes measured at different times.

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
from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: E402
from test_superset_browser import INSPECT  # noqa: E402

SLUGS = ["daily-operations", "flow-sizes", "active-vs-passive", "capacity", "collection"]


KINDS = ("cold", "fresh", "warm", "again", "list")


def load() -> float:
    return os.getloadavg()[0]


TIMEOUT_S = int(os.environ.get("BENCH_TIMEOUT_S", "120"))
STUCK = """() => Array.from(document.querySelectorAll('[data-test="dashboard-component-chart-holder"]'))
  .filter(e => e.querySelector('[data-test="loading-indicator"], .loading') ||
               !e.querySelector('[data-test="slice-container"], [role="alert"], .ant-alert'))
  .map(e => (e.querySelector('[data-test="editable-title"]') || e).innerText.trim().slice(0, 60))"""
RESOURCES = """() => performance.getEntriesByType('resource').map(e => [e.startTime, e.responseEnd, e.name])"""


class CpuMeter:
    """CPU seconds (user + system) used by our Chromium processes, by the main thread of
    its renderers, and by Superset's gunicorn master and workers: unlike render times,
    these hardly depend on what else the machine runs, so they compare changes measured
    under different loads. The renderer's main thread runs the page's scripts, style and
    layout one after the other: its CPU time is about what a page load takes on a client
    with cores to spare (here its background compilers and Superset share two)."""

    def __init__(self, gunicorn_pid: int | None):
        import psutil

        self.psutil = psutil
        self.gunicorn = psutil.Process(gunicorn_pid) if gunicorn_pid else None

    def _tree(self, root, name: str | None = None) -> dict[int, float]:
        out = {}
        try:
            procs = [root] + root.children(recursive=True)
        except self.psutil.Error:
            return out
        for p in procs:
            try:
                if name is None or name in p.name():
                    t = p.cpu_times()
                    out[p.pid] = t.user + t.system
            except self.psutil.Error:
                pass
        return out

    def _main_threads(self, root) -> dict[int, float]:
        out = {}
        try:
            procs = root.children(recursive=True)
        except self.psutil.Error:
            return out
        for p in procs:
            try:
                if "chrom" in p.name() and "--type=renderer" in " ".join(p.cmdline()):
                    main = next(t for t in p.threads() if t.id == p.pid)  # the thread that started it
                    out[p.pid] = main.user_time + main.system_time
            except (self.psutil.Error, StopIteration):
                pass
        return out

    def sample(self) -> tuple[dict, dict, dict]:
        """(browser processes, Superset processes, renderer main threads): CPU s by pid."""
        me = self.psutil.Process(os.getpid())
        return (self._tree(me, "chrom"), self._tree(self.gunicorn) if self.gunicorn else {},
                self._main_threads(me))

    @staticmethod
    def delta(before: dict, after: dict) -> float:
        return sum(v - before.get(pid, 0.0) for pid, v in after.items())


def _settle(page, slug: str, navigate, meter: CpuMeter | None) -> float:
    """Seconds from navigate() until every chart settled (nan if not within TIMEOUT_S);
    the visit's CPU seconds (browser, server) go to render.cpu."""
    before = meter.sample() if meter else None
    t0 = time.monotonic()
    navigate()
    try:
        page.wait_for_function(ALL_CHARTS_SETTLED, timeout=TIMEOUT_S * 1000, polling=50)
    except PlaywrightTimeout:
        stuck = page.evaluate(STUCK)
        print(f"  !! {slug}: not settled after {TIMEOUT_S} s; charts still loading or empty: {stuck}")
        render.cpu = (float("nan"),) * 3
        return float("nan")
    elapsed = time.monotonic() - t0
    if meter:
        time.sleep(0.3)  # let the server finish logging the visit
        after = meter.sample()
        render.cpu = tuple(meter.delta(b, a) for b, a in zip(before, after))  # browser, server, main thread
    return elapsed


def render(page, base: str, slug: str, trace: bool = False, meter: CpuMeter | None = None) -> float:
    """A page load of the dashboard."""
    elapsed = _settle(page, slug, lambda: page.goto(f"{base}/superset/dashboard/{slug}/"), meter)
    if elapsed != elapsed:
        return elapsed
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


def render_from_list(page, base: str, slug: str, meter: CpuMeter | None = None) -> float:
    """Open the dashboard list, then click the dashboard: in-app navigation."""
    page.goto(f"{base}/dashboard/list/")
    link = page.locator(f'a[href$="/superset/dashboard/{slug}/"]').first
    link.wait_for(timeout=TIMEOUT_S * 1000)
    page.wait_for_load_state("networkidle")
    return _settle(page, slug, link.click, meter)


def clear_data_cache(home: Path) -> None:
    cache = home / "superset" / "cache" / "data"
    if cache.exists():
        for f in cache.iterdir():
            f.unlink()


def measure(creds, home: Path | None, rounds: int, slugs: list[str], trace: set[str], gunicorn_pid: int | None) -> dict:
    from playwright.sync_api import sync_playwright

    figures = {s: {k: [] for k in KINDS + tuple(f"{x} cpu" for x in KINDS)} for s in slugs}
    meter = CpuMeter(gunicorn_pid)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for r in range(rounds):
            for slug in slugs:
                row = {}
                kinds = [k for k in KINDS if k != "cold" or home is not None]
                ctx = None
                for kind in kinds:
                    if kind in ("cold", "fresh"):
                        if ctx is not None:
                            ctx.close()
                        ctx = browser.new_context(viewport={"width": 1600, "height": 1200})
                        page = ctx.new_page()
                        login(page, creds)
                        if kind == "cold":
                            clear_data_cache(home)
                    la = load()
                    if kind == "list":
                        secs = render_from_list(page, creds["url"], slug, meter=meter)
                    else:
                        secs = render(page, creds["url"], slug, trace=slug in trace and r == 0, meter=meter)
                    figures[slug][kind].append((secs, la))
                    figures[slug][kind + " cpu"].append((render.cpu, la))
                    row[kind] = (f"{secs:5.2f} s (load {la:4.2f}; CPU s: browser {render.cpu[0]:4.2f} "
                                 f"(main thread {render.cpu[2]:4.2f}), server {render.cpu[1]:4.2f})")
                ctx.close()
                print(f"round {r + 1} {slug:18} " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
        browser.close()
    return figures


def summary(figures: dict) -> None:
    print("\nper dashboard: median [min-max] render seconds, with the load average at the measurements [min-max];")
    print("CPU = median CPU seconds per visit used by the browser (its renderer's main thread) + Superset;")
    print("these hardly depend on the load")
    for slug, kinds in figures.items():
        parts, cpu = [], []
        for kind in KINDS:
            xs = kinds[kind]
            if not xs:
                continue
            failed = sum(1 for x, _ in xs if x != x)
            xs = [(x, la) for x, la in xs if x == x] or [(float("nan"), float("nan"))]
            secs, las = [x for x, _ in xs], [la for _, la in xs]
            if failed:
                parts.append(f"{kind}: {failed} visit(s) never settled;")
            parts.append(f"{kind} {statistics.median(secs):4.2f} [{min(secs):4.2f}-{max(secs):4.2f}] "
                         f"(load {min(las):.1f}-{max(las):.1f})")
            b, sv, m = (statistics.median([c[i] for c, _ in kinds[kind + " cpu"] if c[i] == c[i]] or [float("nan")])
                        for i in range(3))
            cpu.append(f"{kind} {b:.2f} ({m:.2f})+{sv:.2f}")
        print(f"  {slug:18} " + "   ".join(parts) + "   CPU: " + ", ".join(cpu))


def gunicorn_pid(cfg) -> int | None:
    import json

    try:
        return int(json.loads(cfg.path("run", "superset.pid").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def scratch_stack(flows: int):
    """Scratch FLOWLAKE_HOME + demo lake + Superset; returns (home, creds, stop)."""
    from flowlake.base.ports import private_env

    home = Path(tempfile.mkdtemp(prefix="flowlake-bench-superset-"))
    os.environ.update(private_env(home))
    from flowlake.base import config
    from flowlake import superset_cli
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
        from flowlake.base import config
        from flowlake import superset_cli

        config.reset()
        cfg = config.get()
        if not superset_cli.healthy(cfg):
            sys.exit(f"no Superset answering at {superset_cli.url(cfg)} for FLOWLAKE_HOME={args.home}")
        creds = superset_cli.credentials(cfg)
        home = args.home.resolve() if args.clear_cache else None
    else:
        home, creds, stop = scratch_stack(args.flows)
        from flowlake.base import config

        cfg = config.get()
    try:
        figures = measure(creds, home, args.rounds, args.dashboard or SLUGS, set(args.trace), gunicorn_pid(cfg))
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
