"""A lab spec (TOML): topology, grid, repetitions, duration and named conditions.

    study = "smoke"
    duration_s = 4          # each paced/bulk run
    repetitions = 1

    [topology.paths.a]      # one or two paths client <-> server
    rate = "20mbit"         # tbf rate, both directions
    queue_ms = 50           # tbf latency: the longest a packet may wait in the queue
    burst = "15000"         # tbf burst (bytes; default 4 ms at the rate)
    delay_ms = 20           # fixed one-way delay, each direction (RTT + 2x this); no netem here:
                            # NFQUEUE and a delay line (delay.py)

    [conditions.clean]
    [conditions.loss1pct]
    loss_percent = 1.0      # random drop of what reaches the server (nftables numgen / iptables statistic)
    [conditions.flap]
    flap = { down_s = 2, up_s = 4, path = "a" }

    [[grid]]
    kind = "paced"          # paced | bulk | probe | split
    protocol = ["tcp", "udp", "mptcp", "sctp"]
    congestion_control = ["cubic"]
    frame_size = [200]
    rate = [100]            # frames per second (paced); bit/s target for UDP bulk
    path = ["a"]
    conditions = ["clean", "loss1pct"]   # default: every condition

Every list in a [[grid]] block is swept (cartesian product) and every point runs
`repetitions` times under each of its conditions. Errors name the key.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .netns import tc_rate_bps

KINDS = ("paced", "bulk", "probe", "split")
PROTOCOLS = ("tcp", "udp", "mptcp", "sctp")
GRID_KEYS = {"protocol": str, "congestion_control": str, "frame_size": int, "rate": float, "streams": int,
             "window": int, "path": str, "message_size": int}
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,30}$")


class SpecError(ValueError):
    def __init__(self, source: str, key: str, problem: str):
        super().__init__(f"{source}: {key}: {problem}")
        self.key = key


@dataclass(frozen=True)
class PathSpec:
    name: str
    rate: str
    queue_ms: float
    burst: str
    delay_ms: float


@dataclass(frozen=True)
class Condition:
    name: str
    loss_percent: float = 0.0
    flap_down_s: float = 0.0
    flap_up_s: float = 0.0
    flap_path: str = ""


@dataclass(frozen=True)
class Run:
    """One run of the grid: a point, a condition, a repetition."""
    study: str
    kind: str
    condition: Condition
    repetition: int
    params: dict   # protocol, congestion_control, frame_size, rate, streams, window, path, message_size
    attempt: str = ""  # set by `lab run` per process: see run_id

    @property
    def grid_id(self) -> str:
        """The grid point and repetition: the same in every attempt (the done marker's name)."""
        key = json.dumps([self.kind, self.condition.name, self.params], sort_keys=True)
        digest = hashlib.sha1(key.encode()).hexdigest()[:10]
        return f"{self.study}-{digest}-r{self.repetition}"

    @property
    def run_id(self) -> str:
        """What the run's flows and result rows carry. An attempt killed mid-run may already
        have flows in the lake under its id (tagged while its window was open): the rerun's
        attempt gets an id of its own, so the completed run's flows are its own alone."""
        return f"{self.grid_id}-{self.attempt}" if self.attempt else self.grid_id

    def label(self) -> str:
        p = " ".join(f"{k}={v}" for k, v in self.params.items() if v not in (None, ""))
        return f"{self.kind} {p} [{self.condition.name}] #{self.repetition}"


@dataclass
class Spec:
    source: str
    study: str
    duration_s: float
    repetitions: int
    deadline_ms: float | None
    paths: dict[str, PathSpec]
    conditions: dict[str, Condition]
    runs: list[Run] = field(default_factory=list)
    probe_count: int = 5


def _get(d: dict, key: str, kind, source: str, where: str, default=None, required=False):
    if key not in d:
        if required:
            raise SpecError(source, f"{where}{key}", "missing")
        return default
    v = d[key]
    ok = isinstance(v, kind) and not (kind in (int, float, (int, float)) and isinstance(v, bool))
    if not ok:
        want = getattr(kind, "__name__", "number")
        raise SpecError(source, f"{where}{key}", f"expected {want}, got {type(v).__name__} {v!r}")
    return v


def load(path: str | Path) -> Spec:
    source = str(path)
    try:
        doc = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SpecError(source, "(file)", "no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(source, "(syntax)", str(exc)) from None
    return parse(doc, source)


def parse(doc: dict, source: str = "<spec>") -> Spec:
    known = {"study", "duration_s", "repetitions", "deadline_ms", "topology", "conditions", "grid", "probe"}
    for key in doc:
        if key not in known:
            raise SpecError(source, key, f"unknown key (known: {', '.join(sorted(known))})")
    study = _get(doc, "study", str, source, "", required=True)
    if not NAME_RE.match(study):
        raise SpecError(source, "study", f"{study!r}: lower-case letters, digits, - and _ (at most 31)")
    duration = float(_get(doc, "duration_s", (int, float), source, "", 5.0))
    if not 0.5 <= duration <= 3600:
        raise SpecError(source, "duration_s", f"{duration} is outside 0.5..3600")
    reps = _get(doc, "repetitions", int, source, "", 1)
    if not 1 <= reps <= 1000:
        raise SpecError(source, "repetitions", f"{reps} is outside 1..1000")
    deadline = _get(doc, "deadline_ms", (int, float), source, "", None)

    topo = _get(doc, "topology", dict, source, "", required=True)
    raw_paths = _get(topo, "paths", dict, source, "topology.", required=True)
    if not 1 <= len(raw_paths) <= 2:
        raise SpecError(source, "topology.paths", f"one or two paths, got {len(raw_paths)}")
    paths = {}
    for name, p in raw_paths.items():
        where = f"topology.paths.{name}."
        if not isinstance(p, dict):
            raise SpecError(source, where[:-1], "expected a table")
        if not NAME_RE.match(name):
            raise SpecError(source, where[:-1], "path names: lower-case letters, digits, - and _")
        for key in p:
            if key not in ("rate", "queue_ms", "burst", "delay_ms"):
                raise SpecError(source, where + key, "unknown key (known: rate, queue_ms, burst, delay_ms)")
        rate = _get(p, "rate", str, source, where, required=True)
        try:
            bps = tc_rate_bps(rate)
        except Exception:  # noqa: BLE001 - click.BadParameter: re-say it with the key
            raise SpecError(source, where + "rate", f"{rate!r}: expected a tc rate such as 20mbit") from None
        queue = float(_get(p, "queue_ms", (int, float), source, where, 50.0))
        burst = str(_get(p, "burst", (str, int), source, where, max(3028, int(bps / 8 * 0.004))))
        delay = float(_get(p, "delay_ms", (int, float), source, where, 0.0))
        if not 0 <= delay <= 2000:
            raise SpecError(source, where + "delay_ms", f"{delay} is outside 0..2000 (ms, one way)")
        paths[name] = PathSpec(name, rate, queue, burst, delay)

    raw_conds = _get(doc, "conditions", dict, source, "", {"clean": {}})
    conditions = {}
    for name, c in raw_conds.items():
        where = f"conditions.{name}."
        if not NAME_RE.match(name) or not isinstance(c, dict):
            raise SpecError(source, where[:-1], "a table named with lower-case letters, digits, - and _")
        for key in c:
            if key not in ("loss_percent", "flap"):
                raise SpecError(source, where + key, "unknown key (known: loss_percent, flap)")
        loss = float(_get(c, "loss_percent", (int, float), source, where, 0.0))
        if not 0 <= loss < 100:
            raise SpecError(source, where + "loss_percent", f"{loss} is outside 0..100")
        flap = _get(c, "flap", dict, source, where, {})
        down = float(_get(flap, "down_s", (int, float), source, where + "flap.", 0.0, required=bool(flap)))
        up = float(_get(flap, "up_s", (int, float), source, where + "flap.", 0.0, required=bool(flap)))
        fpath = _get(flap, "path", str, source, where + "flap.", next(iter(paths)))
        if flap and (down <= 0 or up <= 0):
            raise SpecError(source, where + "flap", "down_s and up_s must be positive")
        if fpath not in paths:
            raise SpecError(source, where + "flap.path", f"{fpath!r} is not a path of the topology")
        conditions[name] = Condition(name, loss, down, up, fpath if flap else "")

    probe = _get(doc, "probe", dict, source, "", {})
    for key in probe:
        if key != "count":
            raise SpecError(source, f"probe.{key}", "unknown key (known: count)")
    spec = Spec(source, study, duration, reps, deadline, paths, conditions,
                probe_count=_get(probe, "count", int, source, "probe.", 5))
    grid = _get(doc, "grid", list, source, "", required=True)
    for i, block in enumerate(grid):
        spec.runs += _expand(block, i, spec)
    if not spec.runs:
        raise SpecError(source, "grid", "the grid has no runs")
    return spec


def _expand(block: dict, i: int, spec: Spec) -> list[Run]:
    source, where = spec.source, f"grid[{i}]."
    kind = _get(block, "kind", str, source, where, required=True)
    if kind not in KINDS:
        raise SpecError(source, where + "kind", f"{kind!r}: one of {', '.join(KINDS)}")
    axes: dict[str, list] = {}
    for key, value in block.items():
        if key in ("kind", "conditions"):
            continue
        if key not in GRID_KEYS:
            raise SpecError(source, where + key, f"unknown grid key (known: kind, conditions, {', '.join(GRID_KEYS)})")
        values = value if isinstance(value, list) else [value]
        if not values:
            raise SpecError(source, where + key, "an empty list sweeps nothing")
        want = GRID_KEYS[key]
        out = []
        for v in values:
            if want is float and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            if not isinstance(v, want) or isinstance(v, bool):
                raise SpecError(source, where + key, f"expected {want.__name__} values, got {v!r}")
            out.append(v)
        axes[key] = out
    for proto in axes.get("protocol", []):
        if proto not in PROTOCOLS:
            raise SpecError(source, where + "protocol", f"{proto!r}: one of {', '.join(PROTOCOLS)}")
    axes.setdefault("protocol", ["tcp"])
    if kind == "split":
        axes["path"] = ["+".join(spec.paths)]
        if len(spec.paths) != 2:
            raise SpecError(source, where + "kind", "split runs need two paths in the topology")
    else:
        axes.setdefault("path", [next(iter(spec.paths))])
        for p in axes["path"]:
            if p not in spec.paths:
                raise SpecError(source, where + "path", f"{p!r} is not a path of the topology")
    if kind in ("probe", "split"):
        if "message_size" not in axes:
            raise SpecError(source, where + "message_size", f"{kind} runs need message sizes")
    if kind == "paced" and ("rate" not in axes or "frame_size" not in axes):
        raise SpecError(source, where + ("rate" if "rate" not in axes else "frame_size"), "paced runs need it")
    conds = block.get("conditions", list(spec.conditions))
    if not isinstance(conds, list):
        raise SpecError(source, where + "conditions", "expected a list of condition names")
    for c in conds:
        if c not in spec.conditions:
            raise SpecError(source, where + "conditions", f"{c!r} is not declared under [conditions]")
    keys = list(GRID_KEYS)
    runs = []
    for combo in itertools.product(*[axes.get(k, [None]) for k in keys]):
        params = dict(zip(keys, combo))
        if params["protocol"] in ("tcp", "mptcp") and not params["congestion_control"]:
            params["congestion_control"] = "cubic"
        if params["protocol"] in ("udp", "sctp"):
            params["congestion_control"] = ""
        for c in conds:
            for rep in range(spec.repetitions):
                runs.append(Run(spec.study, kind, spec.conditions[c], rep, params))
    # a UDP point swept over congestion controls collapses to one run
    unique = {r.grid_id: r for r in runs}
    return list(unique.values())
