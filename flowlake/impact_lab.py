"""`flowlake lab bulk-impact`: real packets through a rate-limited link, real NetFlow.

Two network namespaces joined by a veth pair; the sender side has a `tbf` qdisc (the
bottleneck: netem does not work on these machines, tbf does). softflowd watches the
link and exports NetFlow v9 to a private nfcapd in the same namespace (loopback, free
port). ping -D runs for the whole test; an iperf3 bulk transfer runs through the
middle. Afterwards nfdump decodes the nfcapd files into flows, the ping output is cut
into 1-second PingER tests, both land in a lab lake (Parquet, the lake layout) and the
bulk_transfers and bulk_impact jobs run on it: loaded vs unloaded RTT and loss.
Namespaces are removed on every exit path (finally + SIGINT/SIGTERM handlers).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import click

from flowlake.base import config
from flowlake.base import spark as spark_factory
from flowlake.base.config import Section
from flowlake.collectors.active import pinger
from flowlake.collectors.active.parsers import iperf3 as iperf3_parser
from flowlake.collectors.active.parsers.ping import PING_REPLY
from flowlake.collectors.active.publish import publish as to_kafka
from flowlake.collectors.active.result import make
from flowlake.collectors.lab.leftovers import owners_dir
from flowlake.collectors.lab.netns import Namespaces, free_udp_port, signals_raise, tc_rate_bps
from flowlake.collectors.lab.netns import sh as _sh
from flowlake.jobs import bulk_impact, bulk_transfers
from flowlake.jobs.context import JobContext
from flowlake.schemas import FLOWS_TABLE, registry


class Lab(Namespaces):
    """Two namespaces joined by one veth pair with a tbf bottleneck on the sender's side."""

    def __init__(self, rate: str | None, record: Path | None = None):  # rate None: a plain link
        super().__init__("fl-lab", record)  # record: its owner record (lab/leftovers.py)
        net = f"10.{random.randint(160, 250)}.{random.randint(0, 255)}"
        self.addr_a, self.addr_b = f"{net}.1", f"{net}.2"
        self.rate = rate

    def build(self):
        self.ns_a, self.ns_b = self.add("a"), self.add("b")
        self.veth_a, self.veth_b = self.link(self.ns_a, self.ns_b, self.addr_a, self.addr_b)
        if self.rate is None:
            return
        # The bottleneck: a token bucket on the sender's side; `latency` sizes its queue,
        # which is where the pings wait behind the bulk transfer.
        self.tbf(self.ns_a, self.veth_a, self.rate)


def ping_windows(text: str, target: str, window_s: float = 1.0, interval_s: float = 0.1,
                 source_file: str = "lab-ping") -> list[dict]:
    """Cut `ping -D` output into PingER tests of `window_s` seconds (sent from the send times)."""
    replies = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("["):
            continue
        ts, _, rest = line[1:].partition("]")
        m = PING_REPLY.match(rest.strip())
        if m:
            # -D stamps the reply; the request left one RTT earlier.
            replies.append((int(m["seq"]), float(m["rtt"]), float(ts) - float(m["rtt"]) / 1000))
    if not replies:
        return []
    t0 = min(r[2] for r in replies) - interval_s * (min(r[0] for r in replies) - 1)
    last_seq = max(r[0] for r in replies)
    out = []
    per_win = max(1, int(round(window_s / interval_s)))
    for first in range(1, last_seq + 1, per_win):
        seqs = range(first, min(first + per_win, last_seq + 1))
        got = [(s, rtt) for s, rtt, _ in replies if s in seqs]
        start = t0 + (first - 1) * interval_s
        end = start + len(seqs) * interval_s
        rec = make("rtt", "", target, int(start * 1000), int(end * 1000),
                   {"interval_s": interval_s, "window_s": window_s, "lab": "bulk-impact"},
                   pinger.metrics(got, len(seqs)), "ping", source_file)
        out.append(rec)
    return out


NFDUMP_FMT = "fmt:%tsr|%ter|%sa|%da|%sp|%dp|%pr|%flg|%tos|%pkt|%byt|%in|%out|%ra"


def nfdump_flows(spool: Path) -> list[dict]:
    """nfcapd files -> FLOWS_TABLE-shaped dicts (one per flow) via `nfdump -o json`."""
    files = sorted(p for p in spool.rglob("nfcapd.*") if not p.name.startswith("nfcapd.current"))
    rows = []
    for f in files:
        res = subprocess.run(["nfdump", "-r", str(f), "-o", "json", "-q"], capture_output=True, text=True,
                             env={**os.environ, "TZ": "UTC"})  # nfdump prints local time
        if res.returncode != 0:
            raise click.ClickException(f"nfdump -r {f} failed: {res.stderr.strip()}")
        text = res.stdout.strip().rstrip(",")
        # An interval without flows (nfcapd rotates on the hour) is a file nfdump reports as text.
        if not text or text == "No matching flows":
            continue
        for i, r in enumerate(json.loads(text if text.startswith("[") else "[" + text + "]")):
            if r.get("type", "FLOW") != "FLOW":
                continue
            def t(key):
                return dt.datetime.fromisoformat(r[key]).replace(tzinfo=dt.UTC)
            ts = t("first")
            rows.append({
                "time_start": ts, "time_end": t("last"), "exporter": str(r.get("ip4_router", r.get("exporter", ""))),
                "input_if": int(r.get("input_snmp", 0)), "output_if": int(r.get("output_snmp", 0)),
                "src_addr": r.get("src4_addr") or r.get("src6_addr", ""),
                "dst_addr": r.get("dst4_addr") or r.get("dst6_addr", ""),
                "src_port": int(r.get("src_port", 0)), "dst_port": int(r.get("dst_port", 0)),
                "proto": int(r.get("proto", 0)), "tcp_flags": 0, "tos": int(r.get("src_tos", 0)),
                "packets": int(r.get("in_packets", 0)), "bytes": int(r.get("in_bytes", 0)),
                "sampling_rate": 1, "src_as": int(r.get("src_as", 0)), "dst_as": int(r.get("dst_as", 0)),
                "source_file": f.name, "file_seq": i,
                "date": ts.strftime("%Y-%m-%d"), "hour": ts.hour})
    return rows


def run_lab(seconds: int = 30, rate: str = "50mbit", lake: Path | None = None, cfg=None,
            progress=None, publish: bool = False) -> dict:
    """Run the whole lab; return the figures (and where the lab lake is)."""
    if os.geteuid() != 0:
        raise click.ClickException("the lab needs root (network namespaces, tc)")
    for tool in ("ip", "tc", "softflowd", "softflowctl", "nfcapd", "nfdump", "iperf3", "ping"):
        if shutil.which(tool) is None:
            raise click.ClickException(f"the lab needs `{tool}` (Debian package) on PATH")
    if seconds < 10:
        raise click.BadParameter("at least 10 seconds (unloaded, loaded, unloaded phases)", param_hint="--seconds")
    tc_rate_bps(rate)  # reject a bad --rate before building anything
    cfg = cfg or config.get()
    work = Path(tempfile.mkdtemp(prefix="bulk-impact-", dir=cfg.path("tmp") if _mk(cfg.path("tmp")) else None))
    lake = Path(lake).resolve() if lake else cfg.path("lab", work.name, "lake")

    lab = Lab(rate, record=owners_dir(cfg) / f"{os.getpid()}.json")
    step = progress or (lambda msg: None)
    with signals_raise():
        try:
            flows, tests = _run_in_namespaces(lab, work, seconds, step)
        finally:
            lab.close()
    if publish:
        step("publishing the active results to Kafka")
        try:
            to_kafka(tests, cfg)
        except Exception as exc:  # noqa: BLE001
            raise click.ClickException(f"publishing to Kafka failed (is the stack up?): {exc}") from None
    step("running the jobs on the lab lake")
    figures = analyse(flows, tests, lake, cfg, lab.addr_b, tc_rate_bps(rate))
    figures.update(rate=rate, seconds=seconds, namespaces=[lab.ns_a, lab.ns_b], published=len(tests) if publish else 0, lake=str(lake), work=str(work), flows=len(flows))
    return figures


def _run_in_namespaces(lab: Lab, work: Path, seconds: int, step) -> tuple[list, list]:
    step("building namespaces")
    lab.build()
    spool = work / "nfcapd"
    spool.mkdir()
    port = free_udp_port()
    nfcapd = lab.spawn(lab.ns_a, "nfcapd", "-p", port, "-b", "127.0.0.1", "-w", spool, "-t", 3600)
    ctl = work / "softflowd.ctl"
    softflowd = lab.spawn(lab.ns_a, "softflowd", "-i", lab.veth_a, "-n", f"127.0.0.1:{port}", "-v", 9, "-d",
                          "-c", ctl, "-p", work / "softflowd.pid", "-t", "maxlife=3600", "-t", "expint=1")
    iperf_srv = lab.spawn(lab.ns_b, "iperf3", "-s", "-p", 5201)
    time.sleep(1.0)
    for p, name in ((nfcapd, "nfcapd"), (softflowd, "softflowd"), (iperf_srv, "iperf3 -s")):
        if p.poll() is not None:
            raise click.ClickException(f"{name} exited at start: {p.stderr.read().strip()}")
    step(f"pinging {lab.addr_b} for {seconds}s; bulk transfer from {int(seconds * 0.4)}s to {int(seconds * 0.75)}s")
    ping = lab.spawn(lab.ns_a, "ping", "-D", "-n", "-i", 0.1, "-w", seconds, lab.addr_b, stdout=subprocess.PIPE)
    time.sleep(seconds * 0.4)
    bulk_s = max(2, int(seconds * 0.35))
    client = lab.spawn(lab.ns_a, "iperf3", "-c", lab.addr_b, "-p", 5201, "-t", bulk_s, "-J", stdout=subprocess.PIPE)
    iperf_out, iperf_err = client.communicate(timeout=bulk_s + 30)
    ping_out, _ = ping.communicate(timeout=seconds + 30)
    step("collecting NetFlow")
    _sh("ip", "netns", "exec", lab.ns_a, "softflowctl", "-c", ctl, "expire-all", check=False)
    time.sleep(1.5)
    lab.stop(softflowd)
    lab.stop(nfcapd)  # SIGTERM: nfcapd closes and renames its current file
    flows = nfdump_flows(spool)
    (work / "ping.txt").write_text(ping_out)
    (work / "iperf3.json").write_text(iperf_out)
    tests = ping_windows(ping_out, lab.addr_b, source_file=str(work / "ping.txt"))
    try:
        tests += iperf3_parser.parse(str(work / "iperf3.json"), iperf_out)
    except Exception:  # noqa: BLE001 - a failed bulk run still leaves the RTT picture
        pass
    return flows, tests


def _mk(p: Path) -> bool:
    p.mkdir(parents=True, exist_ok=True)
    return True


class _LabConfig:
    """The real configuration, with the lake moved to the lab's own folder and the
    link speed set to the bottleneck's rate (so link_share means share of the tbf)."""

    def __init__(self, cfg, lake: Path, link_bps: float | None = None):
        self._cfg, self._lake, self._link = cfg, lake, link_bps

    @property
    def lake(self):
        return self._lake

    @property
    def active(self):
        values = self._cfg.active.as_dict()
        if self._link:
            values["default_interface_speed_bps"] = self._link
        return Section("active", values)

    def __getattr__(self, key):
        return getattr(self._cfg, key)


def analyse(flows: list[dict], tests: list[dict], lake: Path, cfg, target: str,
            link_bps: float | None = None) -> dict:
    """Write flows and tests into a lake, run bulk_transfers + bulk_impact, read the figures."""
    spark = spark_factory.session("flowlake-lab", cfg=cfg)
    lake.mkdir(parents=True, exist_ok=True)
    active_rows = []
    for t in tests:
        start = dt.datetime.fromtimestamp(t["start"] / 1000, dt.UTC)
        active_rows.append({**t, "start": start, "end": dt.datetime.fromtimestamp(t["end"] / 1000, dt.UTC),
                            "date": start.strftime("%Y-%m-%d")})
    active_schema = registry()["active"].spark_schema()
    (spark.createDataFrame(active_rows, active_schema).write.mode("overwrite")
     .partitionBy("date").parquet(str(lake / "active")))
    (spark.createDataFrame(flows, FLOWS_TABLE.spark_schema()).write.mode("overwrite")
     .partitionBy("date", "hour").parquet(str(lake / "flows")))
    day = dt.datetime.fromtimestamp(tests[0]["start"] / 1000, dt.UTC).date() if tests else dt.date.today()
    ctx = JobContext(spark=spark, cfg=_LabConfig(cfg, lake, link_bps), date=day)
    bulk_transfers.run(ctx)
    bulk_impact.run(ctx)
    bulk = ctx.report("bulk_transfers").collect()
    rows = [r for r in ctx.report("bulk_impact").collect() if r.target == target]
    r = rows[0].asDict() if rows else {}
    return {
        "rtt_unloaded_ms": r.get("rtt_median_unloaded_ms"), "rtt_loaded_ms": r.get("rtt_median_loaded_ms"),
        "rtt_p95_unloaded_ms": r.get("rtt_p95_unloaded_ms"), "rtt_p95_loaded_ms": r.get("rtt_p95_loaded_ms"),
        "loss_unloaded": r.get("loss_unloaded"), "loss_loaded": r.get("loss_loaded"),
        "tests_unloaded": r.get("tests_unloaded"), "tests_loaded": r.get("tests_loaded"),
        "p_value": r.get("p_value"), "significant": r.get("significant"),
        "bulk_flows_detected": len(bulk),
        "bulk_flows": [{"src": b.src_addr, "dst": b.dst_addr, "dst_port": b.dst_port, "bytes": b.bytes,
                        "rate_bps": b.rate_bps, "link_share": b.link_share, "reason": b.reason} for b in bulk],
        "date": day.isoformat(),
    }


@click.group()
def lab():
    """Network-namespace labs with real packets (needs root).

    \b
    Examples:
      flowlake lab run examples/lab/smoke.toml        a declared study (resumes if rerun)
      flowlake lab report --study smoke               its results from lake/experiments
      flowlake lab bulk-impact --seconds 30 --rate 50mbit --json
    """


@lab.command("bulk-impact")
@click.option("--seconds", default=30, show_default=True, type=click.IntRange(10, 3600),
              help="Length of the ping run; the bulk transfer runs from 40% to 75% of it.")
@click.option("--rate", default="50mbit", show_default=True, help="tbf rate of the bottleneck (tc syntax).")
@click.option("--lake", type=click.Path(file_okay=False), default=None,
              help="Lake folder for the lab's flows, tests and reports (default: $FLOWLAKE_HOME/lab/<run>/lake).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object.")
@click.option("--publish", is_flag=True,
              help="Also publish the lab's active results to Kafka active.v1 (the running stack's broker).")
def bulk_impact_cmd(seconds, rate, lake, as_json, publish):
    """Measure how a bulk transfer raises RTT and loss on a rate-limited link.

    Builds two network namespaces and a veth pair with a tbf bottleneck, exports
    real NetFlow with softflowd to a private nfcapd, pings for --seconds and runs
    an iperf3 bulk transfer through the middle; then runs the bulk_transfers and
    bulk_impact jobs and prints loaded vs unloaded RTT and loss.

    \b
    Examples:
      flowlake lab bulk-impact                       30 s at 50 Mbit/s
      flowlake lab bulk-impact --seconds 20 --rate 20mbit --json
    """
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)

    console = Console(stderr=True)
    with console.status("lab") as status:
        fig = run_lab(seconds, rate, Path(lake) if lake else None,
                      progress=lambda m: status.update(m) if not as_json else None, publish=publish)
    if as_json:
        click.echo(json.dumps(fig, default=str))
        return
    def f(x, unit=""):
        return "n/a" if x is None else f"{x:.3g}{unit}"

    click.echo(f"bottleneck {rate}, {seconds} s, {fig['flows']} flows, bulk transfers: {fig['bulk_flows_detected']}")
    click.echo(f"RTT median  unloaded {f(fig['rtt_unloaded_ms'], ' ms'):>10}   loaded {f(fig['rtt_loaded_ms'], ' ms')}")
    click.echo(f"RTT p95     unloaded {f(fig['rtt_p95_unloaded_ms'], ' ms'):>10}   loaded {f(fig['rtt_p95_loaded_ms'], ' ms')}")
    click.echo(f"loss        unloaded {f(fig['loss_unloaded']):>10}   loaded {f(fig['loss_loaded'])}")
    click.echo(f"Mann-Whitney p = {f(fig['p_value'])}   lake: {fig['lake']}")
