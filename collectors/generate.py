"""`flowlake generate`: export modelled border traffic as NetFlow v5/v9/IPFIX over UDP."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import click

from flowlake.base import config

_DUR = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_UNIT = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> float:
    """'24h', '90m', '1h30m', '45s', '2d' -> seconds."""
    t = text.strip().lower()
    parts = _DUR.findall(t)
    if not t or "".join(a + b for a, b in parts) != t:
        raise ValueError(f"{text!r} is not a duration: use e.g. 24h, 90m, 1h30m, 45s")
    secs = sum(float(a) * _UNIT[b] for a, b in parts)
    if secs < 1:
        raise ValueError(f"{text!r}: duration must be at least 1s")
    return secs


def parse_start(text: str | None) -> datetime:
    """ISO date or date-time (UTC unless an offset is given); default yesterday 00:00 UTC."""
    if not text:
        today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        return today - timedelta(days=1)
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO date/time: use e.g. 2026-11-20 or 2026-11-20T06:00") from None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def _speedup(text: str) -> float | None:
    if text.lower() in ("max", "0", "inf"):
        return None
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"{text!r}: speedup is a number (1 = real time) or 'max'") from None
    if v <= 0:
        raise ValueError(f"{text!r}: speedup must be positive (or 'max')")
    return v


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--protocol", type=click.Choice(["v5", "v9", "ipfix"]), default="v9", show_default=True,
              help="Export format. v5 carries IPv4 only (the model then draws no IPv6 flows).")
@click.option("--target", default=None, metavar="HOST:PORT",
              help="Collector address [default: 127.0.0.1:<collector.port from config>].")
@click.option("--start", default=None, metavar="ISO", help="Model start time, UTC [default: yesterday 00:00].")
@click.option("--duration", default="24h", show_default=True, help="Model time span: 24h, 90m, 1h30m, 45s.")
@click.option("--flows", type=int, default=None, help="Total flows to export [default 1000000 unless --rate].")
@click.option("--rate", type=float, default=None, help="Mean flows per model second (total = rate x duration).")
@click.option("--speedup", default="max", show_default=True,
              help="Model seconds per wall second (1 = real time, 1440 = a day in a minute) or 'max'.")
@click.option("--max-rate", type=float, default=250000, show_default=True,
              help="Ceiling on flows/s sent, so the collector's socket buffer never overflows.")
@click.option("--truth", "truth_path", type=click.Path(dir_okay=False), default=None,
              help="Write the ground truth here (.json or .parquet).")
@click.option("--active-dir", type=click.Path(file_okay=False), default=None,
              help="Also write matching active results for the ping targets: PingER-style ping output "
                   "(DIR/ping/<target>/), iperf3 -J throughput tests (DIR/iperf3/) and a message-size "
                   "sweep CSV (DIR/sweep/).")
@click.option("--seed", type=int, default=1, show_default=True, help="Random seed (same seed, same traffic).")
@click.option("--record3", is_flag=True, default=False,
              help="Every router also exports flow record revision 3's elements (v9/IPFIX: next hops, direction, "
                   "masks, forwarding status, MACs, MPLS, VRFs, NAT, biflow out counters): the lake then holds "
                   "one more row per biflow (truth: record3.lake_rows).")
def generate(protocol, target, start, duration, flows, rate, speedup, max_rate, truth_path, active_dir, seed,
             record3):
    """Export modelled border traffic as NetFlow v5/v9/IPFIX with a known ground truth.

    Three border routers export from 127.0.0.2, 127.0.0.3 and 127.0.0.4 (one sampled
    1:10, announced by option template); flows follow the model in
    collectors/traffic/model.py: Zipf-popular remote hosts, applications by port,
    lognormal+Pareto flow sizes, a diurnal curve, nightly bulk transfers, scanners
    and a fan-in burst. Flow timestamps are model time, whatever the speedup.

    \b
    Examples:
      flowlake generate --flows 200000 --duration 1h --truth /tmp/truth.json
      flowlake generate --protocol ipfix --target 127.0.0.1:9995 --rate 50 --duration 24h --speedup 1440
      flowlake generate --start 2026-11-20 --duration 24h --flows 2000000 \\
          --truth day.parquet --active-dir var/active
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415  (start-up: rich)

    from flowlake.collectors.traffic import api, exporter  # noqa: PLC0415  (start-up: numpy, scipy)

    cfg = config.get()
    try:
        dur = parse_duration(duration)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--duration") from None
    try:
        t0 = parse_start(start)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--start") from None
    try:
        sp = _speedup(speedup)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--speedup") from None
    try:
        tgt = exporter.parse_target(target or f"127.0.0.1:{cfg.collector.port}", cfg.collector.port)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--target") from None
    if flows is not None and rate is not None:
        raise click.UsageError("give --flows or --rate, not both")
    if rate is not None:
        if rate <= 0:
            raise click.BadParameter(f"{rate}: must be positive", param_hint="--rate")
        flows = int(round(rate * dur))
    flows = 1_000_000 if flows is None else flows
    if flows <= 0:
        raise click.BadParameter(f"{flows}: must be positive", param_hint="--flows")
    if truth_path and not truth_path.endswith((".json", ".parquet")):
        raise click.BadParameter(f"{truth_path}: must end in .json or .parquet", param_hint="--truth")
    if max_rate is not None and max_rate <= 0:
        raise click.BadParameter(f"{max_rate}: must be positive", param_hint="--max-rate")

    with Progress(TextColumn("[bold]exporting"), BarColumn(), MofNCompleteColumn(), TextColumn("flows"),
                  TimeElapsedColumn()) as bar:
        task = bar.add_task("export", total=flows)
        try:
            params = api.params_for(protocol, cfg)
            for r in params.routers:
                r.record3 = record3
            doc = api.generate_day(tgt, t0, dur, flows, protocol, truth_path, active_dir, sp, seed, params=params,
                                   max_rate=max_rate, progress=lambda n: bar.advance(task, n), cfg=cfg)
        except (ValueError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
    s = doc["send"]
    click.echo(f"sent {doc['totals']['flows']} flows ({doc['totals']['packets']} packets, "
               f"{doc['totals']['bytes']} bytes) in {s['datagrams']} datagrams to {doc['target']} "
               f"as {protocol}: {s['flows_per_s']:,.0f} flows/s")
    for e in doc["exporters"]:
        click.echo(f"  {e['name']} {e['address']} 1:{e['sampling_rate']}: {e['flows']} flows")
    if doc.get("record3"):
        click.echo(f"  revision 3: {doc['record3']['biflows']} biflows, {doc['record3']['lake_rows']} lake rows")
    if truth_path:
        click.echo(f"truth: {truth_path}")
    if active_dir:
        click.echo(f"ping files: {doc['ping']['dir']} ({len(doc['ping']['probes'])} probes)")
        click.echo(f"iperf3 files: {doc['iperf3']['dir']} ({len(doc['iperf3']['tests'])} tests)")
        click.echo(f"sweep files: {doc['sweep']['dir']} ({len(doc['sweep']['paths'])} paths)")
