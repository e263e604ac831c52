"""`flowlake demo`: the main job end to end on the embedded default.

Stack up -> a day of modelled border traffic exported as real NetFlow to nfcapd ->
shipped, streamed into the lake -> PingER-style pings and iperf3 tests imported -> the daily
jobs -> Superset provisioned and started. Leaves the stack running until `flowlake down`.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time

import click

from flowlake.base import config as _config

from . import demo_attack, demo_routing, demo_sflow, demo_site, demo_snmp, stack, superset_cli
from .collectors import nfcapd
from .pipelines import ingest


def _yesterday() -> str:
    return (dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=1)).isoformat()


def wait_for_lake(cfg, expect_flows: int, timeout: float, progress=None, extra_rows: int = 0,
                  since: tuple[int, int] = (0, 0)) -> dict:
    """Until the lake holds every flow nfcapd received (all files rotated and shipped).

    extra_rows: rows the lake holds beyond the records sent (a biflow of flow record
    revision 3 lands as two rows); since: (received, lake rows) before the sending, so rows
    of earlier runs do not count. Exact when every datagram arrived; when some were lost
    (received < expected, and nfcapd received nothing more for two rotations and triggers),
    each lost record may have been a biflow, so the lake is complete once it holds at least
    what is left and has not grown for as long. The caller says how many were lost."""
    deadline = time.monotonic() + timeout
    settle = 2 * (float(cfg.collector.rotate_seconds) + float(cfg.spark.trigger_seconds))
    last, changed = None, time.monotonic()
    last_received, received_changed = None, time.monotonic()
    while True:
        received = nfcapd.received(cfg)["flows"]
        rows = ingest.counts(cfg)["flows"]["rows"]
        if progress:
            progress(rows)
        if rows != last:
            last, changed = rows, time.monotonic()
        if received != last_received:
            last_received, received_changed = received, time.monotonic()
        # all sent arrived, or nfcapd has received nothing more for a while: the rest was lost
        if received >= expect_flows * 0.999 or time.monotonic() - received_changed >= settle:
            lost = max(0, expect_flows - received)
            want = received - since[0] + extra_rows
            if rows - since[1] == want or (lost and rows - since[1] >= want - lost
                                           and time.monotonic() - changed >= settle):
                return {"received": received, "lake": rows}
        if time.monotonic() > deadline:
            raise click.ClickException(
                f"timed out: nfcapd received {received:,} flows, lake holds {rows:,}"
                + (f" (+{extra_rows:,} rows of biflows expected)" if extra_rows else "") + "; see `flowlake status`")
        time.sleep(2)


LAB_SPEC = _config.REPO_ROOT / "examples" / "lab" / "demo.toml"


def lab_study(cfg, console, timeout: float = 600) -> dict | None:
    """examples/lab/demo.toml through `flowlake lab run` (namespaces: root only; a rerun of
    the demo finds its runs done), then until its rows are in lake/experiments. None
    when the lab cannot run here (the reason printed)."""
    if os.geteuid() != 0:
        console.print("[yellow]the experiment lab needs root (network namespaces): skipped; the Experiments "
                      "dashboard stays empty (run `sudo flowlake lab run examples/lab/demo.toml` to fill it)")
        return None
    from .collectors.lab.run import State  # noqa: PLC0415  (start-up: the lab's modules)
    from .collectors.lab.spec import load  # noqa: PLC0415  (start-up: the lab's modules)

    spec, state = load(LAB_SPEC), State(cfg.path("state", "lab"), "demo")
    done_before = sum(1 for r in spec.runs if (state.done(r) or {}).get("status") == "done")
    before = ingest.counts(cfg).get("experiments", {}).get("rows", 0)
    res = subprocess.run([sys.executable, "-m", "flowlake.cli", "lab", "run", str(LAB_SPEC), "--json"],
                         stdout=subprocess.PIPE, text=True)
    if res.returncode != 0:
        console.print("[yellow]the experiment lab failed (see above); the demo goes on without it")
        return None
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    settle = 2 * (float(cfg.spark.trigger_seconds) + 1)
    deadline, last, changed = time.monotonic() + timeout, None, time.monotonic()
    while time.monotonic() < deadline:  # the rows go through Kafka and the ingest
        rows = ingest.counts(cfg).get("experiments", {}).get("rows", 0)
        if rows != last:
            last, changed = rows, time.monotonic()
        # the runs done now published rows (a rerun of the demo finds every run done before)
        if (rows > before or summary.get("done", 0) <= done_before) and time.monotonic() - changed >= settle:
            break
        time.sleep(1)
    console.print(f"lab study {summary.get('study', 'demo')}: {summary.get('done', 0)} runs done, "
                  f"{summary.get('skipped', 0)} skipped; lake/experiments holds {last:,} rows")
    return {k: summary.get(k) for k in ("study", "runs", "done", "skipped")} | {"rows": last}


def finish(cfg, console, demo_dir, dates: list, no_superset: bool, before_superset=None) -> str | None:
    """Steps 4-6 once the lake holds the demo's flows: active results, hour close of every
    date, the daily reports of the last one, Superset. Returns Superset's URL (None: skipped).
    before_superset: called once the reports are written (the demo's sFlow agents finish)."""
    day = dates[-1].isoformat()
    console.rule("[bold]4. active results")
    active_files = sorted((demo_dir / "active").rglob("*")) if (demo_dir / "active").exists() else []
    active_files = [p for p in active_files if p.is_file()]
    if active_files:
        res = subprocess.run([sys.executable, "-m", "flowlake.cli", "active", "import", *map(str, active_files)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise click.ClickException(f"active import failed:\n{res.stderr}")
        console.print(f"imported {len(active_files)} active-test files")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not ingest.counts(cfg).get("active", {}).get("rows"):
            time.sleep(2)

    console.rule(f"[bold]5. hour close and daily reports for {day}")
    # The stack's compactor waits compaction.settle_minutes after an hour's last file; the
    # demo's days are complete now, so close them at once: the capacity charts read their rollups.
    for d in dates:
        res = subprocess.run([sys.executable, "-m", "flowlake.cli", "compact", "--date", d.isoformat()])
        if res.returncode != 0:
            raise click.ClickException(f"hour close (compaction and rollups) of {d} failed; see the log above")
    dns = demo_site.start_dns(cfg)  # the remote ends' names for remote_domains (their cache keeps them)
    try:
        res = subprocess.run([sys.executable, "-m", "flowlake.cli", "jobs", "run", "--date", day, "--no-warm"])
    finally:
        if dns is not None:
            dns.terminate()
            dns.wait(10)
    if res.returncode != 0:
        raise click.ClickException("the report jobs failed; see the log above")
    if before_superset is not None:
        before_superset()

    url = None
    if not no_superset:
        console.rule("[bold]6. Superset")

        superset_cli.provision(cfg)
        superset_cli.start(cfg)
        superset_cli.refill_cache(cfg, console)  # the first visitor then gets cached charts
        try:  # what a visitor will see: every chart with data, or the ones without and why
            from .superset_check import check, print_check  # noqa: PLC0415  (start-up: requests)

            print_check(console, check(superset_cli.credentials(cfg)))
        except Exception as exc:  # noqa: BLE001  (the demo's outcome stands)
            console.print(f"[yellow]Superset's charts not checked: {exc}")
        creds = superset_cli.credentials(cfg)
        url = creds["url"]
        console.print(f"Superset: [bold]{creds['url']}[/]  user [bold]{creds['username']}[/]  "
                      f"password [bold]{creds['password']}[/]")
    return url


@click.command()
@click.option("--flows", type=int, default=1_000_000, show_default=True, help="Flows in the modelled day.")
@click.option("--date", "day", default=None, help="UTC day to model, YYYY-MM-DD [default: yesterday].")
# v9 by default: nfcapd 1.7.1 drops IPFIX forwardingStatus (collectors/traffic/record3.NFCAPD_DROPS), v9 keeps it
@click.option("--protocol", type=click.Choice(["v5", "v9", "ipfix"]), default="v9", show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--history-days", type=int, default=7, show_default=True,
              help="Days of history at low volume before the day (rollups, growth and the forecast have days).")
@click.option("--history-flows", type=int, default=20_000, show_default=True, help="Flows in each history day.")
@click.option("--no-superset", is_flag=True, help="Skip Superset (reports only).")
def demo(flows: int, day: str | None, protocol: str, seed: int, history_days: int, history_flows: int,
         no_superset: bool) -> None:
    """Run the main job end to end and leave the stack running.

    \b
    0. the demo site (on the embedded defaults): MMDBs, networks, interface names and
       rules, PingER regions, alert settings (flowlake/demo_site.py), as FLOWLAKE_CONFIG
    1. `flowlake up` (Kafka, ingest, shipper, nfcapd)
    2. a week of history at low volume (rollups of the model's flows, written directly),
       then the modelled routers' BGP views over BMP (flowlake/demo_routing.py), then a
       day of border traffic from the traffic model (flow record revision 3 included),
       exported as real NetFlow
    3. every flow shipped and streamed into the lake (counts checked); then an NTP
       amplification in real time: its attack record and the mitigation's dry-run decision;
       then a net-snmp agent per modelled router serves its interfaces' counters, polled
       every 5 minutes of the day on the day's clock (flowlake/demo_snmp.py); and, as
       root, a small study of the experiment lab (examples/lab/demo.toml, ~1.5 min)
    4. PingER-style pings and iperf3 throughput tests imported beside it (and two sFlow
       agents send to sfcapd in the background: flowlake/demo_sflow.py)
    5. its hours closed (compacted, rolled up) and the daily report jobs for that day
    6. Superset provisioned and started: open the printed URL

    Stop everything with `flowlake down`.
    """
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415  (start-up: rich)

    from .collectors.traffic import api as traffic  # noqa: PLC0415  (start-up: numpy, scipy)

    console = Console(stderr=True)
    cfg = _config.get()
    day = day or _yesterday()
    try:
        date = dt.date.fromisoformat(day)
    except ValueError:
        raise click.BadParameter(f"{day!r} is not a date like 2026-11-20", param_hint="--date") from None
    if flows <= 0 or history_flows <= 0 or history_days < 0:
        raise click.BadParameter("--flows and --history-flows must be positive, --history-days at least 0")
    demo_dir = cfg.path("demo", day)
    demo_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()

    site_toml = None
    if demo_site.own_config(cfg) is None:
        console.rule("[bold]0. the demo site")
        site_toml = demo_site.prepare(cfg)
        os.environ["FLOWLAKE_CONFIG"] = str(site_toml)  # this process, its commands and the stack it starts
        _config.reset()
        cfg = _config.get()
        console.print(f"demo settings: FLOWLAKE_CONFIG={site_toml} (export it to run flowlake commands as the demo)")
    else:
        console.print(f"[yellow]{cfg.source}: your own configuration; the demo site's files and settings are not "
                      "applied (no names, networks or regions unless yours give them)")
    days = [date - dt.timedelta(days=k) for k in range(history_days, 0, -1)]

    console.rule("[bold]1. stack up")
    try:
        stack.up_stack(cfg, with_superset=False)
    except (RuntimeError, TimeoutError) as exc:
        raise click.ClickException(str(exc)) from None

    console.rule(f"[bold]2. {len(days)} days of history ({history_flows:,} flows a day, rollups only), then a day "
                 f"of border traffic ({flows:,} flows, {protocol}) for {day}")
    if days:
        t_hist = time.monotonic()
        hist = demo_site.write_history(cfg, days[0], len(days), history_flows, seed=seed + 1000)
        console.print(f"history {days[0]} .. {days[-1]}: {hist['flows']:,} modelled flows as rollups "
                      f"({hist['1d']:,} daily rows) in {time.monotonic() - t_hist:.1f} s")

    feeds = None
    if site_toml and cfg.routing.enabled:
        feeds = demo_routing.announce(cfg)  # open until the demo ends
        console.print(f"BMP: {len(demo_site.ROUTERS)} modelled routers sent {feeds.routes:,} routes to the routing "
                      "collector: every flow of the day gets its AS path, communities and prefixes")
    already = nfcapd.received(cfg)["flows"]
    already_rows = ingest.counts(cfg)["flows"]["rows"]
    target = (cfg.collector.bind if cfg.collector.bind != "0.0.0.0" else "127.0.0.1", cfg.collector.port)
    total = flows
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as bar:
        task = bar.add_task("exporting", total=total)
        truth = traffic.generate_day(
            target=target, start=dt.datetime.combine(date, dt.time(), dt.timezone.utc), duration_s=86400, flows=flows,
            protocol=protocol, truth_path=demo_dir / "truth.json", active_dir=demo_dir / "active", seed=seed,
            params=demo_site.params(protocol, cfg), cfg=cfg, progress=lambda m: bar.update(task, completed=m),
            counters_path=demo_dir / "interfaces.json" if site_toml else None)
        extra = (truth.get("record3") or {}).get("biflows", 0)  # one more lake row each
        bar.update(task, completed=total)
        console.rule("[bold]3. shipping and streaming into the lake")
        task2 = bar.add_task("in the lake", total=already_rows + total + extra)
        got = wait_for_lake(cfg, already + total, timeout=max(600, total / 2000),
                            progress=lambda n: bar.update(task2, completed=n), extra_rows=extra,
                            since=(already, already_rows))
    console.print(f"nfcapd received {got['received']:,} flows; the lake holds {got['lake']:,} rows "
                  f"({extra:,} biflows: two rows each)")

    if got["received"] < total + already:
        console.print(f"[yellow]nfcapd received {got['received'] - already:,} of {total:,} flows: "
                      f"{total + already - got['received']:,} were lost on the way (UDP datagrams dropped: a "
                      "loaded machine or a small socket buffer); the reports cover what arrived")
    console.rule("[bold]3b. an attack (Attacks dashboard; the mitigation in dry-run)")
    attack = demo_attack.show(cfg, console, protocol)
    snmp = None
    if site_toml:
        console.rule("[bold]3c. SNMP: a net-snmp agent per router, its interface counters polled over the day")
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as bar:
            task = bar.add_task("polls", total=None)
            snmp = demo_snmp.replay(cfg, demo_dir / "interfaces.json",
                                    progress=lambda k, n: bar.update(task, completed=k, total=n))
        console.print(f"{snmp['agents']} agents, {snmp['polls']} polls on the day's clock: {snmp['rows']:,} counter "
                      f"rows in lake/interface_counters ({snmp['errors']} failed polls) in {snmp['seconds']} s")
        if snmp["errors"]:
            console.print(f"[yellow]SNMP polls failed: {snmp['last_error']}")
    console.rule("[bold]3d. the experiment lab: a small study on real packets (Experiments dashboard)")
    lab = lab_study(cfg, console)
    sflow = demo_sflow.Sender(cfg, console).start()  # sFlow v5 agents, in the background during steps 4-5
    url = finish(cfg, console, demo_dir, [date], no_superset, before_superset=sflow.wait)
    summary = {"date": day, "history_days": len(days), "flows_sent": total, "biflows": extra,
               "config": str(site_toml or cfg.source), "nfcapd_received": got["received"], "lake_rows": got["lake"],
               "truth": str(demo_dir / "truth.json"), "superset": url, "attack": attack, "snmp": snmp, "lab": lab,
               "seconds": round(time.monotonic() - t_start, 1)}
    if feeds is not None:
        feeds.close()
        console.print("the modelled routers' BMP sessions end with the demo: later flows are unrouted")
    click.echo(json.dumps(summary, indent=2))
    console.print("The stack keeps running: `flowlake status`, `flowlake query ...`, `flowlake down` to stop.")
