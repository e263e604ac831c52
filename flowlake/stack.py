"""`flowlake up`, `down`, `status`: the local stack under $FLOWLAKE_HOME.

The components and their order are registered once (flowlake/components.py): Kafka first
(topics), then the ingest (a consumer), then the shipper (a producer), then nfcapd (so
files are shipped as soon as they appear), ..., Superset last. `up` is idempotent: it
starts only what is not running, so it also restarts a component that died.
"""
from __future__ import annotations

import json
import logging
import time

import click

from flowlake import importer as archive
from flowlake.base import config as _config
from flowlake import components
from flowlake.base import spark_cluster
from flowlake.base.process import port_open
from flowlake.jobs import rdns
from flowlake.jobs.query.status import status as query_status
from flowlake.pipelines.retention import disk, report
from flowlake.tables import process_table

from .collectors import health, nfcapd, sampling
from .collectors.lab.status import status as lab_status
from .collectors.snmp import service as snmp_service
from .jobs import pinger_regions
from .pipelines import hour_close, ingest, ingest_lag, lake_check
from .pipelines.alerts import notify_status as ns, service as alerts_service

log = logging.getLogger("flowlake.stack")


def order(cfg=None) -> list[str]:
    """The components' names in start order (flowlake/components.py)."""
    return components.names()


def up_stack(cfg=None, with_superset: bool = True) -> dict:
    """Start every enabled component that does not run, in the registry's order."""
    cfg = cfg or _config.get()
    steps = [c for c in components.all_components(cfg) if c.enabled()]
    if not with_superset:
        steps = [c for c in steps if c.name != "superset"]
    paused = (disk.paused(cfg) or {}).get("components", [])
    if paused:  # the disk guard stopped them; its service starts them when space returns
        click.echo(f"  {', '.join(paused)} paused by the disk guard (disk below retention.disk_floor_pct)", err=True)
        steps = [c for c in steps if c.name not in paused]
    if cfg.spark.master == "cluster":  # the ingest runs on this home's Spark cluster: start it first
        info = spark_cluster.up(cfg)
        click.echo(f"  cluster   {info['master']} (master pid {info['master_pid']}, "
                   f"{len(info['worker_pids'])} workers)", err=True)
    started = {}
    for comp in steps:
        was = comp.state()["state"] == "running"
        t0 = time.monotonic()
        pid = comp.start()
        started[comp.name] = {"pid": pid, "already_running": was, "seconds": round(time.monotonic() - t0, 1)}
        click.echo(f"  {comp.name:9s} {'running' if was else 'started'} (pid {pid})", err=True)
    return started


def down_stack(cfg=None) -> None:
    """Stop every component in the reverse order: nfcapd flushes its current file, the
    shipper finishes, the ingest drains; the retention service first (it must not restart
    what is being stopped)."""
    cfg = cfg or _config.get()
    comps = components.all_components(cfg)
    for comp in [c for c in comps if c.name == "retention"] + [c for c in reversed(comps) if c.name != "retention"]:
        if comp.name == "kafka" and cfg.spark.master == "cluster":
            spark_cluster.down(cfg)
        comp.stop()


def component_state(cfg, name: str) -> dict:
    return components.get(cfg, name).state(retention_paused(cfg))


def counts(cfg) -> dict:
    out: dict = {"nfcapd": nfcapd.received(cfg), "spool": nfcapd.spool_usage(cfg),
                 "collector_rejected": nfcapd.rejected(cfg)}
    shipper_state = cfg.path("state", "shipper.json")
    try:
        out["shipper"] = json.loads(shipper_state.read_text())
    except (OSError, ValueError):
        out["shipper"] = {}
    out["import"] = import_counts(cfg)
    out["kafka"] = kafka_offsets(cfg)
    out["lake"] = ingest.counts(cfg)
    out["compaction"] = compaction_status(cfg)
    out["ingest"] = ingest_lag.status(cfg)
    q_files = list((cfg.lake / "quarantine" / "nfcapd").glob("*.reason")) if cfg.lake.exists() else []

    out["quarantined"] = {
        "nfcapd_files": len(q_files),
        "lake_files": lake_check.quarantined(cfg.lake),
        "kafka_messages": sum(v.get("quarantined", 0) for v in out["lake"].values()),
    }
    warn = cfg.collector.spool_warn_bytes
    out["spool"]["warning"] = (
        f"spool holds {out['spool']['bytes']} bytes of nfcapd files, above collector.spool_warn_bytes={warn}"
        if out["spool"]["bytes"] > warn else None
    )
    return out


def import_counts(cfg) -> dict:
    """`flowlake import`: files and flows imported over the ledger's life, the last run's state."""
    return archive.status(cfg)


def compaction_status(cfg) -> dict:
    try:
        return hour_close.status(cfg)
    except Exception as exc:  # status must never crash on a damaged state file
        return {"error": str(exc)}


def kafka_offsets(cfg) -> dict:
    """End offsets per topic (transaction markers included: an upper bound on messages)."""
    if not port_open(cfg.kafka.host, cfg.kafka.port):
        return {}
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415  (start-up: confluent_kafka)

    consumer = Consumer({**cfg.kafka_client_conf(), "group.id": "flowlake-status", "enable.auto.commit": False})
    out = {}
    try:
        meta = consumer.list_topics(timeout=5)
        for topic in (cfg.kafka.flows_topic, cfg.kafka.active_topic, cfg.kafka.dlq_topic):
            if topic not in meta.topics:
                continue
            total = 0
            for p in meta.topics[topic].partitions:
                lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
                total += hi - lo
            out[topic] = total
    except Exception as exc:  # status must never crash on a sick broker
        out["error"] = str(exc)
    finally:
        consumer.close()
    return out


def retention_paused(cfg) -> list[str]:
    return (disk.paused(cfg) or {}).get("components", [])


def retention_status(cfg) -> dict:
    return report.status_summary(cfg)


def status_dict(cfg=None) -> dict:
    cfg = cfg or _config.get()
    paused = retention_paused(cfg)
    comps = {c.name: c.state(paused) for c in components.all_components(cfg)}

    return {"home": str(cfg.home_dir), "components": comps, "counts": counts(cfg), "sampling": sampling.status(cfg),
            "retention": retention_status(cfg), "query": _query_status(cfg),
            "exporters": health.status(cfg), "cluster": cluster_state(cfg), "notify": notify_status(cfg),
            "snmp": snmp_status(cfg), "pinger": _pinger_status(cfg),
            "lab": _lab_status(cfg), "rdns": _rdns_status(cfg), "enrich": enrich_status(cfg),
            "alerts": alerts_status(cfg)}


def notify_status(cfg) -> dict:
    """Alert notifications per channel: sent, failed, retrying, dropped; the last `notify test`."""
    try:
        return ns.status(cfg)
    except Exception as exc:  # status must never crash on a damaged state file
        return {"error": str(exc)}


def snmp_status(cfg) -> dict:
    """The SNMP poller per exporter and flow coverage warnings (collectors/snmp)."""
    try:
        return snmp_service.status(cfg)
    except Exception as exc:  # status must never crash on a damaged poller state
        return {"error": str(exc), "exporters": {}, "errors": 0}


def _pinger_status(cfg) -> dict:
    return pinger_regions.status(cfg)


def _lab_status(cfg) -> dict:
    return lab_status(cfg)


def _rdns_status(cfg) -> dict:
    """Reverse DNS of the remote_domains report: cache size and bound, the last report's counts."""
    try:
        return rdns.status(cfg)
    except (OSError, ValueError) as exc:  # status must never crash on a bad config or cache
        return {"error": str(exc)}


def _print_rdns(console, r: dict) -> None:
    if "error" in r:
        console.print(f"[red]reverse DNS: {r['error']}[/]")
        return
    line = (f"reverse DNS (remote_domains): cache {r['cache_entries']:,} of {r['cache_max_entries']:,} addresses "
            f"({r['cache_bytes']:,} bytes, TTL {r['cache_ttl_hours']:g} h), server {r['server']}")
    last = r.get("last_run")
    if last:
        line += (f"; last report {last['date']}: {last['resolved']:,} resolved, {last['unknown']:,} unknown, "
                 f"{last['timed_out']:,} timed out, {last['not_tried']:,} not tried (budget) in {last['seconds']:.1f} s")
    console.print(line)


def enrich_status(cfg) -> dict:
    from .pipelines.enrich import status as enrich  # noqa: PLC0415  (start-up: numpy, pyarrow)

    try:
        return enrich.status(cfg)
    except (OSError, ValueError) as exc:  # status must never crash on a bad config or state file
        return {"error": str(exc)}


def alerts_status(cfg) -> dict:
    """The alerts service, open alerts by severity, its lag (pipelines/alerts/service.py)."""
    try:
        return alerts_service.status(cfg)
    except Exception as exc:  # status must never crash on a bad alerts table
        return {"enabled": True, "error": str(exc)}


def _query_status(cfg) -> dict:
    try:
        return query_status(cfg)
    except (OSError, ValueError) as exc:  # status must never crash on a bad config or lake
        return {"error": str(exc)}


def _print_exporters(console, exporters: dict) -> None:
    if exporters["exporters"]:
        console.print(health.status_table(exporters))
    if exporters["silent"]:
        console.print(f"[bold red]WARNING: {exporters['silent']} exporter(s) silent for "
                      f"{exporters['silent_after_seconds']:g} s or more (health.silent_after_seconds)[/]")


def cluster_state(cfg) -> dict:
    """The Spark standalone cluster of this home, if one was started ({} otherwise)."""
    return spark_cluster.status(cfg)




@click.command()
@click.option("--no-superset", is_flag=True, help="Do not start Superset even if provisioned.")
def up(no_superset: bool) -> None:
    """Start the local stack in the background; return when it is healthy.

    Starts whatever is not already running: Kafka (KRaft, single node; storage
    formatted and topics created on first start), the streaming ingest, the shipper,
    nfcapd on the collector port and, once provisioned, Superset. Run it again after a
    component died to restart just that one.

    \b
    Two stacks side by side:
      FLOWLAKE_HOME=/tmp/a flowlake up
      FLOWLAKE_HOME=/tmp/b FLOWLAKE_COLLECTOR_PORT=2056 FLOWLAKE_KAFKA_PORT=9192 \\
        FLOWLAKE_KAFKA_CONTROLLER_PORT=9193 FLOWLAKE_SUPERSET_PORT=8089 flowlake up
    """
    cfg = _config.get()
    click.echo(f"flowlake up: home {cfg.home_dir}", err=True)
    try:
        up_stack(cfg, with_superset=not no_superset)
    except (RuntimeError, TimeoutError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"stack is up: routers export to udp://{cfg.collector.bind}:{cfg.collector.port}; "
               "`flowlake status` shows counts", err=True)


@click.command()
def down() -> None:
    """Stop every component cleanly (nfcapd flushes its current file first)."""
    down_stack()
    click.echo("stack is down", err=True)


def ingest_table(lag: dict):
    """The ingest's lag behind Kafka and its rate, per topic (pipelines/ingest_lag.py)."""
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    t = Table(title="ingest: lag behind Kafka and rate")
    for col in ("topic", "offsets behind", "flows behind (est.)", "flows/s last min", "flows/s busy", "flows/msg"):
        t.add_column(col, justify="left" if col == "topic" else "right")
    fmt = lambda v: "-" if v is None else f"{v:,.0f}"  # noqa: E731
    for info in lag.values():
        t.add_row(info["topic"], fmt(info.get("offsets_behind")), fmt(info.get("flows_behind_estimate")),
                  fmt(info.get("rows_per_s_last_minute")), fmt(info.get("rows_per_s_while_busy")),
                  fmt(info.get("flows_per_message")))
    return t


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json: bool) -> None:
    """Each component's state, pid and port, and counts at every stage.

    \b
    Stages: flows nfcapd received (and its sequence errors) -> flows in shipped files
    -> messages in Kafka -> rows in the lake; plus quarantined files and messages, and
    the ingest's lag per topic (offsets and estimated flows behind) and its rate.
    Exporters: per router (address, observation domain) its latest interval's flows/s
    and bytes/s, sequence failures (datagrams lost on the way), templates, samplers and
    sampling rates, clock skew, last flow seen, and SILENT after
    health.silent_after_seconds without a flow (`--json`: key "exporters").
    Notifications: per channel (webhook, email) alerts sent, failed, retrying, dropped
    from a full queue, and the last `flowlake notify test` (`--json`: key "notify").
    SNMP poller: per exporter its agent, sysName, interfaces, last poll and last error
    (timeout, wrong community, authentication), and flow coverage warnings: hours whose
    flow bytes / counter bytes is outside 1 +/- snmp.coverage_tolerance (`--json`: "snmp").
    Enrichment: the ASN/geo databases and networks file in use (build date, records),
    refused files, the SNMP cache, rules, and the newest lake hour's share of flows
    with unknown AS, country and interface name (`--json`: key "enrich").
    """
    st = status_dict()
    if as_json:
        click.echo(json.dumps(st, indent=2, default=str))
        return
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    console = Console()
    console.print(process_table(f"flowlake stack ({st['home']})", "component", st["components"]))
    c = st["counts"]
    n, s = c["nfcapd"], c.get("shipper", {})
    lake = c["lake"].get("flows", {})
    ct = Table(title="flows at every stage")
    ct.add_column("stage")
    ct.add_column("flows", justify="right")
    ct.add_column("detail")
    ct.add_row("nfcapd received", f"{n['flows']:,}", f"sequence errors {n['sequence_errors']}, bad packets {n['bad_packets']}")
    ct.add_row("spool (unshipped+shipped files)", f"{c['spool']['files']:,} files", f"{c['spool']['bytes']:,} bytes")
    ct.add_row("shipped to Kafka", f"{s.get('flows_shipped', 0):,}", f"{s.get('files_shipped', 0)} files, {s.get('files_pending', '?')} pending")
    imp = c.get("import", {})
    if imp:
        ct.add_row("imported archive (flowlake import)", f"{imp.get('flows_shipped', 0):,}",
                   f"{imp.get('files_shipped', 0)} files, {imp.get('files_quarantined', 0)} quarantined, {imp.get('state', '?')}")
    ct.add_row("Kafka flows.v1 offsets", f"{c['kafka'].get(_config.get().kafka.flows_topic, 0):,}", "incl. transaction markers")
    ct.add_row("in the lake", f"{lake.get('rows', 0):,}", "")
    rej = c["collector_rejected"]
    ct.add_row("rejected by nfcapd", f"{rej['errors']:,} errors", f"bad packets {rej['bad_packets']}")
    comp = c.get("compaction", {})
    if "hours_compacted" in comp:
        bpf = comp["bytes_per_flow"]
        ct.add_row("compacted (hour close)", f"{comp['rows']:,}",
                   f"{comp['hours_compacted']} hours compacted, {comp['hours_waiting']} waiting"
                   + (f", {bpf} bytes/flow" if bpf else "") + (f", {comp['errors']} errors" if comp["errors"] else "")
                   + (f", {comp['retired']['folders']} swapped-out hours kept for readers" if comp.get("retired", {}).get("folders") else ""))
        ct.add_row("rollups (1m/5m/1h/1d)", " / ".join(str(r["dates"]) for r in comp["rollups"].values()) + " days",
                   f"{comp['rollups']['1h']['first'] or '-'} .. {comp['rollups']['1h']['last'] or '-'} (1h)")
    q = c["quarantined"]
    ct.add_row("quarantined", f"{q['kafka_messages']:,} msgs", f"{q['nfcapd_files']} nfcapd files")
    console.print(ct)

    sampling.print_status(console, st["sampling"])
    qs = st["query"]
    if "error" not in qs:
        console.print(f"flowlake query: engine {qs['engine']}" + (f" (DuckDB in the command, {qs['threads']} threads now)" if qs["engine"] == "local" else "")
                      + f"; the lake holds {qs['hours']} hours in {qs['files']} files (at most {qs['max_files_per_hour']} an hour); "
                      f"index {qs['index_hours']} hours, {qs['index_bytes']:,} bytes (last {qs['index_days']} days)")
        console.print(f"flowlake query start: fast path {'on' if qs['fast_start'] else 'off ([query] fast_start)'}, "
                      f"{qs['parser']} filter parser; cache {qs['cache_files']} files, {qs['cache_bytes']:,} bytes "
                      f"in {qs['cache_dir']} (parsed config files, at most 8)")
        sv = qs["server"]
        console.print("flowlake query server: " + (
            f"running, {sv['answered'] or 0:,} questions taken (help and errors go back to the command), "
            f"{sv['busy'] or 0:,} left to the command "
            f"(busy: at most {sv['max_clients']} at once), {sv['bad_requests'] or 0} bad requests; {sv['socket']}"
            if sv["running"] else ("not running: commands start cold (`flowlake up` starts it)" if sv["enabled"]
                                   else "off ([query] server = false)")))
    _print_exporters(console, st["exporters"])

    if "error" in st["snmp"]:
        console.print(f"[bold red]SNMP poller status: {st['snmp']['error']}[/]")
    else:
        snmp_service.print_status(console, st["snmp"])

    console.print(pinger_regions.status_line(st["pinger"]))
    _print_rdns(console, st["rdns"])
    if "open_by_severity" in st["alerts"] or not st["alerts"].get("enabled"):
        alerts_service.print_status(console, st["alerts"])
    if st.get("cluster"):
        from .cluster import print_status  # noqa: PLC0415  (start-up: flowlake status)

        print_status(st["cluster"], console)
    console.print(ingest_table(c.get("ingest", {})))
    if st["lab"]:
        console.print(st["lab"]["line"])
    if "error" not in st["enrich"]:
        from .pipelines.enrich import status as enrich  # noqa: PLC0415  (start-up: numpy, pyarrow)

        enrich.print_status(console, st["enrich"])
    if c["spool"].get("warning"):
        console.print(f"[bold red]WARNING: {c['spool']['warning']}[/]")

    report.render_status(console, st["retention"])
    if "error" in st["notify"]:
        console.print(f"[bold red]notifications: status unavailable: {st['notify']['error']}[/]")
    else:
        ns.render(console, st["notify"])
