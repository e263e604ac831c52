"""`flowlake lab run SPEC.toml`: build the topology, run every pending run of the grid,
publish each run's rows, and leave a done marker per run so a killed lab resumes.

A run's marker (state/lab/<study>/<grid id>.json) is written after its rows reached Kafka;
a rerun skips runs with markers. The rows go in one transaction with the run's ledger
record (ledger.py), so a stop between the two leaves a marker the rerun takes back from
the ledger instead of publishing the run twice. A run done under `--no-publish` has a
marker saying so ("published": false, its figures in it): a later publishing rerun
publishes it from the marker, the same way, instead of skipping it. The namespaces are
removed on every exit path (finally + SIGINT/SIGTERM turned into exceptions).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

import click

from flowlake.base import config
from flowlake.base import faultpoints as faults

from . import leftovers, results
from .export import FlowExport
from .ledger import Ledger
from .metrics import fit_line
from .netns import Namespaces, signals_raise
from .runners import Runner, Skip
from .spec import Run, Spec, SpecError, load
from .topology import Topology

FRESH = "fresh_start"  # not *.json: the study folder's *.json are the done markers
TOOLS = ("ip", "tc", "iperf3", "softflowd", "softflowctl")


class State:
    """Done markers of one study, and a summary `flowlake status` reads."""

    def __init__(self, root: Path, study: str):
        self.root = root
        self.dir = root / study
        self.dir.mkdir(parents=True, exist_ok=True)

    def start_fresh(self) -> None:
        """`--fresh`: the fresh start is recorded first, then the markers go. The ledger's
        records from before it are old results: `--fresh` tombstones them when it can
        publish, and `_recover` ignores any older than this record (`--fresh --no-publish`
        cannot reach Kafka, so a later publishing rerun must not take them back)."""
        _atomic(self.dir / FRESH, json.dumps({"at": time.time()}))
        for path in self.dir.iterdir():
            if path.name == FRESH:
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def fresh_since(self) -> float:
        """When this study last started afresh (0: never)."""
        try:
            return float(json.loads((self.dir / FRESH).read_text())["at"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0.0

    def marker(self, run: Run) -> Path:
        return self.dir / f"{run.grid_id}.json"

    def done(self, run: Run) -> dict | None:
        try:
            return json.loads(self.marker(run).read_text())
        except (OSError, ValueError):
            return None

    def mark(self, run: Run, info: dict) -> dict:
        marker = {"run_id": run.run_id, "label": run.label(), **info}
        self.write(run, marker)
        return marker

    def write(self, run: Run, marker: dict) -> None:
        _atomic(self.marker(run), json.dumps(marker))

    def summary(self, spec: Spec, **extra) -> dict:
        markers = [self.done(r) for r in spec.runs]
        out = {"study": spec.study, "spec": spec.source, "runs": len(spec.runs),
               "done": sum(1 for m in markers if m and m["status"] == "done"),
               "skipped": sum(1 for m in markers if m and m["status"] == "skipped"),
               "pending": sum(1 for m in markers if not m),
               "unpublished": sum(1 for m in markers if _unpublished(m)), "at": time.time(), **extra}
        _atomic(self.root / "last.json", json.dumps(out))
        return out


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _fmt_s(s: float) -> str:
    s = int(round(s))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def estimate_s(spec: Spec, run: Run) -> float:
    """Rough seconds per run before any has finished (set-up and tear-down included)."""
    if run.kind in ("probe", "split"):
        return 3.0 + spec.probe_count * 0.3
    return spec.duration_s + 2.5


def run_spec(spec: Spec, cfg, state_root: Path | None = None, publish: bool = True, export: bool = True,
             echo=None, fresh: bool = False) -> dict:
    """Run the spec's pending runs (all of them with `fresh`); returns the state summary."""
    echo = echo or (lambda m: click.echo(m, err=True))
    if os.geteuid() != 0:
        raise click.ClickException("the lab needs root (network namespaces, tc)")
    delayed = [p.name for p in spec.paths.values() if p.delay_ms]
    for tool in TOOLS + (("iptables",) if delayed else ()):
        if shutil.which(tool) is None:
            why = f" (the NFQUEUE rule of delay_ms on path {', '.join(delayed)})" if tool == "iptables" else ""
            raise click.ClickException(f"the lab needs `{tool}` (Debian package) on PATH{why}")
    leftovers.clean(cfg, echo)  # a killed lab's namespaces and processes, before ours
    root = state_root or cfg.path("state", "lab")
    state = State(root, spec.study)
    if fresh:
        state.start_fresh()
    ledger, recovered, kept = None, 0, 0
    if publish:
        ledger = Ledger(cfg, spec.study)
        if fresh:
            ledger.forget()
        else:
            recovered = _recover(spec, state, ledger)
            kept = _publish_kept(spec, state, ledger, echo)
    attempt = f"a{int(time.time()):x}"  # this process's attempt at the runs left (Run.run_id)
    todo = [dataclasses.replace(r, attempt=attempt) for r in spec.runs if state.done(r) is None]
    done_before = len(spec.runs) - len(todo)
    took_back = f" ({recovered} published before a stop: marker taken from the ledger)" if recovered else ""
    took_back += f" ({kept} done with --no-publish: published now from their markers)" if kept else ""
    echo(f"lab {spec.study}: {len(spec.runs)} runs, {done_before} already done{took_back}, {len(todo)} to run")
    if not todo:
        return state.summary(spec, recovered=recovered, published_kept=kept)
    work = cfg.path("tmp", "lab", spec.study)
    work.mkdir(parents=True, exist_ok=True)
    lab = Namespaces("fl-lab", record=leftovers.owners_dir(cfg) / f"{os.getpid()}.json")
    topo = Topology(spec, lab, int(cfg.lab.delay_queue_packets))
    runner = Runner(spec, topo, work, int(cfg.active.mss_bytes), str(cfg.active.zero_loss_rule))
    _load_models(spec, state, runner)
    exporter = None
    took: list[float] = []
    current = None  # (run, start) of a run under way: its window closed if the lab stops in it
    with signals_raise():
        try:
            topo.build()
            if export:
                exporter = FlowExport(cfg, topo, work)
                exporter.start()
            for i, run in enumerate(todo, start=1):
                t0 = time.time()
                if exporter is not None:
                    exporter.begin(run, t0)
                    current = (run, t0)
                try:
                    out = runner.run(run)
                except Skip as why:
                    if exporter is not None:
                        exporter.register(run, t0, t0)  # close its window: no traffic
                        current = None
                    state.mark(run, {"status": "skipped", "reason": str(why)})
                    echo(f"[{done_before + i}/{len(spec.runs)}] {run.label()}: skipped: {why}")
                    continue
                t1 = time.time()
                if exporter is not None:
                    exporter.register(run, t0, t1)
                    current = None
                marker = {"run_id": run.run_id, "label": run.label(), "status": "done", "start": t0, "end": t1,
                          "metrics": out["metrics"], "probes": out.get("probes", []), "flaps": out.get("flaps", []),
                          "flap_windows": out.get("flap_windows", []),
                          "published": publish, "exporter": exporter.address if exporter else ""}
                if ledger is not None:
                    _publish(ledger, run, marker)
                if run.kind == "probe":
                    _add_probe(runner, run, out["probes"])
                state.write(run, marker)
                if not cfg.lab.keep_work:  # the figures are in the marker; the raw output can go
                    shutil.rmtree(work / run.run_id, ignore_errors=True)
                took.append(time.time() - t0)
                mean = sum(took) / len(took)
                eta = sum(mean if r.kind == run.kind else estimate_s(spec, r) for r in todo[i:])
                echo(f"[{done_before + i}/{len(spec.runs)}] {run.label()}: {_headline(out['metrics'])} "
                     f"({took[-1]:.1f}s) ETA {_fmt_s(eta)}")
            if exporter is not None:
                exporter.stop()
                exporter = None
        finally:
            try:
                if exporter is not None:
                    if current is not None:  # a half-done attempt keeps its flows; the rerun is a new attempt
                        exporter.interrupted(*current)
                    exporter.stop()
            finally:  # the namespaces go whatever the export's last words did
                lab.close()
    return state.summary(spec, namespaces=[topo.client, topo.server], recovered=recovered, published_kept=kept)


def _headline(m: dict) -> str:
    keys = ("throughput", "achieved_rate", "latency_p50", "max_inter_frame_delay", "loss", "latency")
    parts = []
    for k in keys:
        if m.get(k) is not None:
            v = m[k]
            parts.append(f"{k}={v / 1e6:.2f}Mbit/s" if k == "throughput" else f"{k}={v:.3g}")
    return " ".join(parts[:4])


def _add_probe(runner: Runner, run: Run, lat: list[float]) -> None:
    pts = runner.__dict__.setdefault("_points", {}).setdefault(run.params["path"], [])
    pts += [(float(run.params["message_size"]), ms) for ms in lat]
    fit = fit_line(pts)
    if fit:
        runner.models[run.params["path"]] = fit


def _publish(ledger, run: Run, marker: dict) -> None:
    """A done run's rows and probes, from its marker, in one transaction with its ledger record."""
    ms = int(marker["start"] * 1000), int(marker["end"] * 1000)
    ledger.publish(run, results.rows(run, marker["metrics"], *ms),
                   results.probe_records(run, marker.get("probes", []), *ms), marker)
    faults.point("lab.published")  # tests: a stop between the commit and the marker


def _unpublished(marker: dict | None) -> bool:
    """A run done under `--no-publish`: its figures are only in its marker."""
    return bool(marker) and marker["status"] == "done" and marker.get("published") is False


def _publish_kept(spec: Spec, state: State, ledger, echo) -> int:
    """Runs done under `--no-publish` keep their figures, window and run_id in their
    markers: a publishing rerun publishes them from there (not measured again, so the rows
    match the flows exported under that run_id), each once: the marker says published after
    the commit, and a stop in between leaves a ledger record `_recover` takes back first."""
    n = 0
    for run in spec.runs:
        marker = state.done(run)
        if not _unpublished(marker):
            continue
        attempt = marker["run_id"][len(run.grid_id) + 1:]
        run = dataclasses.replace(run, attempt=attempt)
        if run.run_id != marker["run_id"]:
            raise click.ClickException(f"{state.marker(run)}: run_id {marker['run_id']!r} is not of grid point "
                                       f"{run.grid_id}: remove the marker to run it again")
        marker = {**marker, "published": True}
        echo(f"{run.label()}: done with --no-publish ({run.run_id}): publishing it from its marker")
        _publish(ledger, run, marker)
        state.write(run, marker)
        n += 1
    return n


def _recover(spec: Spec, state: State, ledger) -> int:
    """Markers of runs the ledger says were published but that have none, or one of a
    `--no-publish` run (a stop between the commit and the marker; a `--no-publish` rerun
    of a run whose commit had lost its marker): the ledger's record is written back, so
    those runs are done and in the lake once, not run or published again. Records of runs
    started before the study's last fresh start are not taken back."""
    book = ledger.recorded()
    since = state.fresh_since()
    n = 0
    for run in spec.runs:
        old = run.grid_id in book and float(book[run.grid_id].get("start") or 0) < since
        marker = state.done(run)
        if (marker is None or _unpublished(marker)) and run.grid_id in book and not old:
            state.write(run, book[run.grid_id])
            n += 1
    return n


def _load_models(spec: Spec, state: State, runner: Runner) -> None:
    """Probe runs done before a restart still feed the split runs' models."""
    for run in spec.runs:
        marker = state.done(run) if run.kind == "probe" else None
        if marker and marker["status"] == "done":
            _add_probe(runner, run, marker.get("probes", []))


@click.command("run")
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--state", "state_dir", type=click.Path(file_okay=False), default=None,
              help="Folder of the per-run done markers (default: $FLOWLAKE_HOME/state/lab).")
@click.option("--no-publish", is_flag=True,
              help="Keep the results in the state folder; send nothing to Kafka. A later run without it "
                   "publishes them (once, from the markers; not measured again).")
@click.option("--no-export", is_flag=True, help="Do not export the runs' traffic as NetFlow to the stack's nfcapd.")
@click.option("--fresh", is_flag=True,
              help="Forget this study's done markers (and its ledger records; with --no-publish they stay in "
                   "Kafka but are ignored from then on) and run the whole grid again.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def run_cmd(spec_file, state_dir, no_publish, no_export, fresh, as_json):
    """Run a lab study declared in SPEC_FILE (TOML; see examples/lab/).

    Builds a client and a server network namespace joined by one or two tbf-shaped
    paths, runs the grid (protocol x frame size x rate x streams x window x congestion
    control x path x message size, each condition, each repetition), exports the
    traffic as NetFlow to the running stack's nfcapd and publishes one row per run and
    metric to Kafka ([kafka] experiments_topic), which the ingest lands in
    lake/experiments/. Progress and ETA go to stderr. Killed and rerun, it resumes
    where it stopped (first removing what a SIGKILLed lab left, as `flowlake lab
    clean` does), and a run's rows reach the lake once: they are published in one
    Kafka transaction with the run's ledger record ([kafka] lab_ledger_topic), which a
    rerun reads back. Runs done with `--no-publish` are published by the next run
    without it, from their done markers (not run again). `--fresh` starts over. Needs root.

    \b
    Examples:
      flowlake lab run examples/lab/smoke.toml
      flowlake lab run examples/lab/paced.toml --no-publish --no-export
    """
    try:
        spec = load(spec_file)
    except SpecError as exc:
        raise click.ClickException(str(exc)) from None
    cfg = config.get()
    root = Path(state_dir) if state_dir else cfg.path("state", "lab")
    summary = run_spec(spec, cfg, root, publish=not no_publish, export=not no_export, fresh=fresh)
    if as_json:
        click.echo(json.dumps(summary))
    else:
        click.echo(f"{spec.study}: {summary['done']} done, {summary['skipped']} skipped, "
                   f"{summary['pending']} pending of {summary['runs']} runs")
