"""What retention shows: the tier tables of `flowlake retention` and `flowlake status`."""
from __future__ import annotations

from pathlib import Path

from flowlake.base.disk import human  # noqa: F401  (re-exported: report.human)
from flowlake.collectors import kafka_retention as topics
from flowlake.pipelines.retention import readers, run, spool

from . import disk, tiers
from .tiers import Tier, Unit


def status_summary(cfg) -> dict:
    """Per tier size, oldest day and limit; disk vs high water and floor; the pause; Kafka's
    topic settings. Cheap: directory sizes only, no ledger read."""
    spool_tier = Tier("spool", f"in the lake + {cfg.retention.spool_grace_hours} h")
    spool_tier.units = [Unit("spool", p, tiers.nfcapd_day(p.name), tiers.disk_bytes(p))
                        for p in spool.spool_files(cfg).values()]
    all_tiers = [spool_tier, run.kafka_tier(cfg), *tiers.lake_tiers(cfg), *readers.reader_tiers(cfg)]
    out = {"tiers": [t.summary() for t in all_tiers]}
    u = disk.usage(cfg)
    out["disk"] = u.as_json()
    out["alarm"] = u.alarm()
    out["paused"] = disk.paused(cfg)
    out["last_run"] = run.last_run(cfg)
    out["kafka_topics"] = {}
    if spool.broker_up(cfg):
        try:
            out["kafka_topics"] = topics.describe(cfg)
        except Exception as exc:  # status never fails on a sick broker
            out["kafka_topics"] = {"error": str(exc)}
    return out


def tier_table(title: str, summaries: list[dict], show_removal: bool):
    """One row per tier; notes go below the table (80 columns stay readable)."""
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    t = Table(title=title, caption="\n".join(f"{s['tier']}: {s['note']}" for s in summaries if s.get("note")) or None)
    t.add_column("tier", no_wrap=True)
    t.add_column("limit")
    for col in ("units", "size", "oldest day") + (("remove", "frees") if show_removal else ()):
        t.add_column(col, justify="left" if col == "oldest day" else "right", no_wrap=True)
    for s in summaries:
        row = [s["tier"], s["limit"], f"{s['units']:,}", human(s["bytes"]), s["oldest"] or "-"]
        if show_removal:
            row += [f"{s['expire_units']:,}", human(s["expire_bytes"])]
        t.add_row(*row)
    return t


def disk_line(d: dict) -> str:
    colour = {"ok": "green", "high": "yellow", "floor": "bold red"}[d["level"]]
    return (f"disk {d['path']}: [{colour}]{d['used_pct']:.1f}% used[/] of {human(d['total'])} "
            f"(high water {d['high_water_pct']:g}%), {d['free_pct']:.1f}% free (floor {d['floor_pct']:g}%)")


def render_status(console, st: dict) -> None:
    """The retention part of `flowlake status`."""
    console.print(tier_table("storage per tier (retention)", st["tiers"], show_removal=False))
    console.print(disk_line(st["disk"]))
    topics = {k: v for k, v in st.get("kafka_topics", {}).items() if isinstance(v, dict)}
    for topic, conf in topics.items():
        ms, size = int(conf.get("retention.ms", -1)), int(conf.get("retention.bytes", -1))
        console.print(f"kafka {topic}: retention {'forever' if ms < 0 else f'{ms / 3600000:g} h'}, "
                      f"{'no size limit' if size < 0 else human(size) + ' per partition'}")
    if st.get("alarm"):
        console.print(f"[bold red]DISK ALARM: {st['alarm']}[/]")
    if st.get("paused"):
        p = st["paused"]
        console.print(f"[bold red]PAUSED: {', '.join(p.get('components', [])) or 'nothing running'} "
                      f"stopped by the disk guard ({p.get('reason', '')}); they resume when space returns[/]")


def render_plan(console, plan_json: dict, home: Path, dry_run: bool, limit: int = 30) -> None:
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    verb = "would remove" if dry_run else "removed"
    console.print(tier_table(f"retention per tier ({'dry run: nothing removed' if dry_run else 'done'})",
                             plan_json["tiers"], show_removal=True))
    by_tier: dict[str, list[dict]] = {}
    for u in plan_json["remove"]:
        by_tier.setdefault(u["tier"], []).append(u)
    for tier, units in by_tier.items():
        t = Table(title=f"{tier}: {verb} {len(units)} ({human(sum(u['bytes'] for u in units))})")
        for col in ("day", "path", "size", "why"):
            t.add_column(col, justify="right" if col == "size" else "left", no_wrap=col in ("day", "size"))
        for u in units[:limit]:
            path = Path(u["path"])
            rel = path.relative_to(home) if path.is_relative_to(home) else path
            t.add_row(u["day"] or "-", str(rel), human(u["bytes"]), u["why"])
        if len(units) > limit:
            t.add_row("", f"... and {len(units) - limit} more (--json lists all)", "", "")
        console.print(t)
    total = plan_json["remove_bytes"]
    console.print(f"{verb} {len(plan_json['remove'])} units, {'frees' if dry_run else 'freed'} {human(total)}")
    for topic, k in plan_json.get("kafka", {}).items():
        state = ("would set" if dry_run else "set") if k["changed"] else "already"
        console.print(f"kafka {topic}: {state} retention.ms={k['set']['retention.ms']} "
                      f"retention.bytes={k['set']['retention.bytes']}")
    if plan_json.get("kafka_error"):
        console.print(f"[yellow]kafka topic retention not checked: {plan_json['kafka_error']}[/]")
    console.print(disk_line(plan_json["disk"]))
