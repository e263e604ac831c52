"""Prometheus metrics of the stack: `/metrics` on [metrics] bind:port, and `flowlake metrics`.

At each scrape every registered component (flowlake/components.py) reports its state and
the numbers of its `status()`, and the stack adds the flows counted at every stage: the
same functions `flowlake status` prints from, so the endpoint and the command agree.
Metric names: `flowlake_component_up{component}`, `flowlake_<component>_<field...>` for a
component's status figures (names that are data, such as topics or exporters, become
`key0`, `key1` labels), and `flowlake_stage_flows{stage}`.
"""
from __future__ import annotations

import logging
import signal
import socket
import threading
from dataclasses import dataclass

import click

from flowlake import components, stack
from flowlake.base import config as _config
from flowlake.base.component import Component, Sample, numeric_samples
from flowlake.base.process import python_argv, wait_until

log = logging.getLogger("flowlake.metrics")
PREFIX = "flowlake_"


def samples(cfg) -> list[Sample]:
    """Every sample of one scrape. A component whose status fails is reported as
    `flowlake_status_error{component}` = 1 instead of breaking the scrape."""
    out: list[Sample] = []
    paused = stack.retention_paused(cfg)
    for comp in components.all_components(cfg):
        try:
            state = comp.state(paused)
            out.extend(comp.metrics(state=state, status=comp.status() if state["state"] == "running" or comp.name in (
                "nfcapd", "sfcapd", "shipper", "ingest", "compactor", "retention") else {}))
        except Exception as exc:  # noqa: BLE001  (a scrape reports, never fails)
            log.warning("metrics of %s: %s", comp.name, exc)
            out.append(Sample("status_error", "1 when a component's status could not be read", 1.0,
                              {"component": comp.name}))
    counts = stack.counts(cfg)
    lake = counts.get("lake", {}).get("flows", {})
    stages = {"nfcapd_received": counts["nfcapd"].get("flows", 0),
              "sfcapd_received": counts.get("sfcapd", {}).get("flows", 0),
              "shipped": counts.get("shipper", {}).get("flows_shipped", 0),
              "kafka_offsets": counts.get("kafka", {}).get(cfg.kafka.flows_topic, 0),
              "lake": lake.get("rows", 0),
              "quarantined_messages": counts["quarantined"]["kafka_messages"]}
    for stage, value in stages.items():
        out.append(Sample("stage_flows", "flows counted at each stage (flowlake status: flows at every stage)",
                          float(value or 0), {"stage": stage}))
    out.extend(numeric_samples("spool", counts.get("spool", {}), {}))
    return out


def exposition(cfg) -> bytes:
    """The Prometheus text format of one scrape (prometheus_client's own encoder)."""
    from prometheus_client import CollectorRegistry, generate_latest  # noqa: PLC0415  (start-up: prometheus_client)
    from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415  (start-up: prometheus_client)

    class Collector:
        def collect(self):
            families: dict[tuple, GaugeMetricFamily] = {}
            for s in samples(cfg):
                labels = tuple(sorted(s.labels))
                key = (s.name, labels)
                if key not in families:
                    # one family per name: the first label set names the label keys
                    if any(k[0] == s.name for k in families):
                        continue  # a second label shape under one name is not valid exposition
                    families[key] = GaugeMetricFamily(PREFIX + s.name, s.help, labels=list(labels))
                families[key].add_metric([s.labels[k] for k in labels], s.value)
            yield from families.values()

    registry = CollectorRegistry()
    registry.register(Collector())
    return generate_latest(registry)


def serve(cfg, stop: threading.Event | None = None) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: PLC0415  (start-up: flowlake status)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics here")
                return
            body = exposition(_config.get())
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):  # scrapes are not news
            log.debug(fmt, *args)

    server = ThreadingHTTPServer((cfg.metrics.bind, int(cfg.metrics.port)), Handler)
    stop = stop or threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"metrics: http://{cfg.metrics.bind}:{cfg.metrics.port}/metrics", flush=True)
    stop.wait()
    server.shutdown()


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class MetricsSettings:
    """[metrics]"""
    enabled: bool
    bind: str
    port: int


class Metrics(Component):
    """The stack's Prometheus endpoint ([metrics])."""
    name = "metrics"
    stop_timeout = 10.0
    settings_type = MetricsSettings
    section = "metrics"

    def port(self) -> int:
        return self.settings.port

    def enabled(self) -> bool:
        return self.settings.enabled

    def start(self) -> int | None:
        proc = self.managed()
        if proc.running():
            return proc.pid()
        host, port = self.settings.bind, self.settings.port
        if not _port_free(host, port):
            log.warning("metrics endpoint not started: %s:%d is in use (set FLOWLAKE_METRICS_PORT)", host, port)
            return None
        pid = proc.start(python_argv("metrics", "--serve"))
        wait_until(lambda: not _port_free(host, port), 30, "the metrics endpoint to listen", interval=0.2, proc=proc)
        return pid

    def status(self) -> dict:
        return {}


@click.command()
@click.option("--serve", is_flag=True, help="Serve /metrics on [metrics] bind:port until stopped (`flowlake up` does).")
def metrics(serve: bool) -> None:
    """Prometheus metrics of the stack (the figures of `flowlake status`).

    \b
    Without --serve: print one scrape in Prometheus' text format.
      flowlake metrics | grep flowlake_stage_flows
      curl -s http://127.0.0.1:9469/metrics        # the endpoint `flowlake up` starts
    """
    cfg = _config.get()
    if serve:
        serve_fn = globals()["serve"]
        serve_fn(cfg)
        return
    click.echo(exposition(cfg).decode(), nl=False)
