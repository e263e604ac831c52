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

from flowlake import components
from flowlake import importer as archive
from flowlake.base import config as _config
from flowlake.base import spark_cluster
from flowlake.base.process import port_open
from flowlake.cluster import print_status
from flowlake.collectors import nfcapd, sfcapd
from flowlake.collectors import status as collectors_status
from flowlake.jobs import status as jobs_status
from flowlake.pipelines import hour_close, ingest, ingest_lag, lake_check
from flowlake.pipelines import status as pipelines_status
from flowlake.pipelines.retention import disk
from flowlake.tables import process_table

log = logging.getLogger("flowlake.stack")


def order(cfg=None) -> list[str]:
    """The components' names in start order (flowlake/components.py)."""
    return components.names()


def up_stack(cfg=None, with_superset: bool = True) -> dict:
    """Start every enabled component that does not run, in the registry's order."""
    cfg = cfg or _config.get()
    from flowlake.lake_cli import check_up  # noqa: PLC0415  (start-up: the lake's check only for `up`)

    check_up(cfg)  # lake/flows of an older flowlake: `flowlake lake migrate` first (nothing started)
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
                 "collector_rejected": nfcapd.rejected(cfg),
                 "sfcapd": sfcapd.received(cfg), "sfcapd_rejected": sfcapd.rejected(cfg),
                 "sflow_drops": sfcapd.drops_usage(cfg)}
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



def status_dict(cfg=None) -> dict:
    """Everything `flowlake status --json` shows: the components (the registry), the flows
    counted at every stage, and each stage's own sections (collectors/status.py,
    pipelines/status.py, jobs/status.py)."""
    cfg = cfg or _config.get()
    paused = retention_paused(cfg)
    comps = {c.name: c.state(paused) for c in components.all_components(cfg)}
    return {"home": str(cfg.home_dir), "components": comps, "counts": counts(cfg), "cluster": cluster_state(cfg),
            **collectors_status.sections(cfg), **pipelines_status.sections(cfg), **jobs_status.sections(cfg)}












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
    Routing (with [routing] enabled): the BMP collector's routers, sessions, prefixes per
    table (IPv4/IPv6), paths, memory, last update and session resets by reason
    (`--json`: key "routing"; `flowlake routing status` shows the same).
    Enrichment: the ASN/geo databases and networks file in use (build date, records),
    refused files, the SNMP cache, rules, and the newest lake hour's share of flows
    with unknown AS, country and interface name (`--json`: key "enrich").
    Lake: per Delta table its version, the _delta_log's files and bytes, the last checkpoint,
    the oldest version the log holds and the oldest still readable; bounded by [lake]
    checkpoint_interval and log_retention_hours (`--json`: key "lake_logs").
    """
    st = status_dict()
    if as_json:
        click.echo(json.dumps(st, indent=2, default=str))
        return
    from rich.console import Console  # noqa: PLC0415  (start-up: rich, for the table only)
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
    sf = c.get("sfcapd", {})
    if sf.get("flows") or st["components"].get("sfcapd", {}).get("state") == "running":
        ct.add_row("sfcapd received (sFlow samples)", f"{sf['flows']:,}", f"bad packets {sf['bad_packets']}")
    sd = c.get("sflow_drops", {})
    if sd.get("records") or sd.get("files"):
        ct.add_row("sFlow drop samples (sFlow tap)", f"{sd['records']:,}",
                   f"{sd['files']} files, {sd['bytes']:,} bytes in spool/{sfcapd.DROPS_SUBDIR}"
                   + (f", {sd['unwritten']} not written" if sd.get("unwritten") else ""))
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
    srej = c.get("sfcapd_rejected", {})
    if srej.get("errors"):
        ct.add_row("rejected by sfcapd", f"{srej['errors']:,} datagrams",
                   "; ".join(f"{k}: {v}" for k, v in srej["reasons"].items()))
    comp = c.get("compaction", {})
    if "hours_compacted" in comp:
        bpf = comp["bytes_per_flow"]
        ct.add_row("compacted (hour close)", f"{comp['rows']:,}",
                   f"{comp['hours_compacted']} hours compacted, {comp['hours_waiting']} waiting"
                   + (f", {bpf} bytes/flow" if bpf else "") + (f", {comp['errors']} errors" if comp["errors"] else ""))
        ct.add_row("rollups (1m/5m/1h/1d)", " / ".join(str(r["dates"]) for r in comp["rollups"].values()) + " days",
                   f"{comp['rollups']['1h']['first'] or '-'} .. {comp['rollups']['1h']['last'] or '-'} (1h)")
    q = c["quarantined"]
    ct.add_row("quarantined", f"{q['kafka_messages']:,} msgs", f"{q['nfcapd_files']} nfcapd files")
    console.print(ct)
    collectors_status.render(console, st)
    pipelines_status.render(console, st)
    jobs_status.render(console, st)
    if st.get("cluster"):
        print_status(st["cluster"], console)
    if c["spool"].get("warning"):
        console.print(f"[bold red]WARNING: {c['spool']['warning']}[/]")
