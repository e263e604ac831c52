"""`flowlake probe`: PingER-style active tests on a schedule.

Every N minutes, per target: ping once a second until 10 replies arrive or 30 requests
have been sent (PingER's rule), then optionally iperf3 tests sweeping streams and
window sizes. Results are parsed exactly like imported files and published to Kafka
active.v1 (or printed with --print).
"""
from __future__ import annotations

import json
import signal
import subprocess
import time

import click

from flowlake.base import config

from .parsers import iperf3 as iperf3_parser
from .parsers import ping as ping_parser
from .publish import publish
from .result import ParseError, to_json


def ping_until(target: str, want: int = 10, max_sent: int = 30, interval: float = 1.0,
               timeout_s: float = 2.0) -> str:
    """Run `ping -D`, stopping (SIGINT, so ping prints its statistics) after `want` replies."""
    proc = subprocess.Popen(["ping", "-D", "-n", "-i", str(interval), "-W", str(timeout_s), "-c", str(max_sent), target],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, replies = [], 0
    for line in proc.stdout:
        lines.append(line)
        if " bytes from " in line and "DUP!" not in line:
            replies += 1
            if replies >= want:
                proc.send_signal(signal.SIGINT)
                break
    rest, err = proc.communicate(timeout=max_sent * interval + timeout_s + 10)
    lines.append(rest)
    text = "".join(lines)
    if "packets transmitted" not in text:
        raise click.ClickException(f"ping {target} failed: {err.strip() or 'no statistics printed'}")
    return text


def run_round(targets, iperf_targets, streams, windows, duration, ping_interval, iperf_port=5201) -> list[dict]:
    records = []
    for t in targets:
        text = ping_until(t, interval=ping_interval)
        try:
            recs = ping_parser.parse_ping(f"probe:ping:{t}", text)
        except ParseError as exc:
            raise click.ClickException(str(exc)) from None
        for r in recs:
            r["tool"], r["source_file"] = "probe", ""
            r["parameters"]["target"] = t
        records.extend(recs)
    for t in iperf_targets:
        for s in streams:
            for w in windows or [None]:
                cmd = ["iperf3", "-c", t, "-p", str(iperf_port), "-J", "-t", str(duration), "-P", str(s)]
                if w:
                    cmd += ["-w", str(w)]
                res = subprocess.run(cmd, capture_output=True, text=True)
                try:
                    recs = iperf3_parser.parse(f"probe:iperf3:{t}", res.stdout)
                except ParseError as exc:
                    raise click.ClickException(f"{' '.join(cmd)}: {exc}") from None
                for r in recs:
                    r["parameters"].update(window_requested=w or "default", sweep="streams/window")
                    r["tool"], r["source_file"] = "probe/iperf3", ""
                records.extend(recs)
    return records


def _csv_ints(ctx, param, value):
    try:
        return [int(v) for v in value.split(",") if v.strip()] if value else [1]
    except ValueError:
        raise click.BadParameter(f"{value!r}: comma-separated integers, e.g. 1,2,4") from None


@click.command()
@click.option("--target", "targets", multiple=True, help="Host to ping (repeatable; default [active] probe_targets).")
@click.option("--interval", type=click.FloatRange(min=0.1), default=None,
              help="Minutes between rounds per target (default [active] probe_interval_minutes).")
@click.option("--once", is_flag=True, help="Run a single round and exit.")
@click.option("--ping-interval", type=click.FloatRange(min=0.2), default=1.0, show_default=True,
              help="Seconds between echo requests.")
@click.option("--iperf3", "iperf_targets", multiple=True, help="Also run iperf3 against this server (repeatable).")
@click.option("--streams", callback=_csv_ints, default="1", show_default=True, help="iperf3 -P values to sweep.")
@click.option("--windows", default="", help="iperf3 -w values to sweep, e.g. 128K,1M (default: system).")
@click.option("--duration", type=click.IntRange(1, 600), default=5, show_default=True, help="iperf3 -t seconds.")
@click.option("--iperf3-port", type=click.IntRange(1, 65535), default=5201, show_default=True, help="iperf3 server port.")
@click.option("--print", "print_only", is_flag=True, help="Print records as JSON instead of publishing to Kafka.")
def probe(targets, interval, once, ping_interval, iperf_targets, streams, windows, duration, iperf3_port,
          print_only):
    """Run PingER-style probes on a schedule and publish them to Kafka active.v1.

    Per round and target: ping until 10 replies or 30 sent; RTT min/avg/max, loss,
    duplicates, reorders, IPDV and jitter (IQR of IPDV). Optional iperf3 sweeps.

    \b
    Examples:
      flowlake probe --target 192.0.2.1 --target 198.51.100.7 --interval 30
      flowlake probe --target 127.0.0.1 --once --print
      flowlake probe --iperf3 192.0.2.9 --streams 1,4 --windows 256K,4M --once
    """
    cfg = config.get()
    targets = list(targets) or list(cfg.active.probe_targets)
    if not targets and not iperf_targets:
        raise click.UsageError("no targets: pass --target HOST or set [active] probe_targets")
    minutes = interval if interval is not None else float(cfg.active.probe_interval_minutes)
    wins = [w.strip() for w in windows.split(",") if w.strip()]
    while True:
        began = time.monotonic()
        records = run_round(targets, iperf_targets, streams, wins, duration, ping_interval, iperf3_port)
        if print_only:
            for r in records:
                click.echo(json.dumps(to_json(r), sort_keys=True))
        else:
            try:
                n = publish(records, cfg)
            except Exception as exc:  # noqa: BLE001
                raise click.ClickException(f"publishing to Kafka failed: {exc}") from None
            click.echo(f"round: {n} results published to {cfg.kafka.active_topic}", err=True)
        if once:
            return
        time.sleep(max(0.0, minutes * 60 - (time.monotonic() - began)))
