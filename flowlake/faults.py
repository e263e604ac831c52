"""Fault harness: send a known stream of NetFlow while SIGKILLing nfcapd, the shipper,
the Kafka broker and the Spark ingest at random moments, restarting them with
`flowlake up` (up_stack), then prove the lake holds exactly the flows nfcapd wrote:
flows, packets and bytes equal per nfcapd file, and no (file, position) twice.

    python -m flowlake.faults                 # short form (what the tests run)
    python -m flowlake.faults --soak          # >= 1M flows, 20 faults (make soak)

Runs a private stack under a temporary FLOWLAKE_HOME on free ports.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from flowlake import components, stack
from flowlake.base import config
from flowlake.base.faultpoints import point  # noqa: F401  (re-exported: faults.point(name))
from flowlake.base.ports import private_env

COMPONENTS = ("nfcapd", "shipper", "kafka", "ingest")


def file_totals_nfdump(path: Path) -> tuple[int, int, int] | None:
    """(flows, packets, bytes) of one nfcapd file as nfdump reads it; None if unreadable."""
    res = subprocess.run(["nfdump", "-r", str(path), "-q", "-o", "pipe"], capture_output=True, text=True)
    if res.returncode != 0:
        return None
    flows = packets = nbytes = 0
    for line in res.stdout.splitlines():
        parts = line.split("|")
        if len(parts) < 22:
            continue
        flows += 1
        packets += int(parts[20])
        nbytes += int(parts[21])
    return flows, packets, nbytes


def lake_per_file(lake: Path) -> dict[str, tuple[int, int, int]]:
    """(flows, packets, bytes) per nfcapd file in the lake, packets and bytes as the
    routers sent them (divided by sampling_rate: nfcapd writes v9 wire counts). Read while
    the stack's compactor may swap hours: a connection that reruns a read a swap broke."""
    from flowlake.pipelines.lake import duckdb_connect  # noqa: PLC0415  (start-up: duckdb)

    if not (lake / "flows" / "_delta_log").is_dir():
        return {}
    rows = duckdb_connect(lake.parent).execute(
        f"select source_file, count(*), sum(packets // greatest(sampling_rate, 1)), "
        f"sum(bytes // greatest(sampling_rate, 1)) from delta_scan('{lake}/flows') "
        "group by all").fetchall()
    return {r[0]: (r[1], int(r[2]), int(r[3])) for r in rows}


def lake_duplicates(lake: Path) -> int:
    from flowlake.pipelines.lake import duckdb_connect  # noqa: PLC0415  (start-up: duckdb)

    if not (lake / "flows" / "_delta_log").is_dir():
        return 0
    return duckdb_connect(lake.parent).execute(
        f"select count(*) from (select source_file, file_seq from delta_scan('{lake}/flows') "
        "group by all having count(*) > 1)").fetchone()[0]


def lake_health(lake: Path) -> tuple[int, int]:
    """Exporter health rows (issue 20) ride in the files' transactions: (flows they count,
    (file, exporter) pairs written more than once)."""
    import duckdb  # noqa: PLC0415  (start-up: duckdb)

    from flowlake.pipelines.lake_read import lake_files  # noqa: PLC0415  (start-up: the seam)

    files = lake_files(lake, "exporter_health")[1]  # a Delta table's current version (never a glob)
    if not files:
        return 0, 0
    src = "read_parquet([" + ", ".join("'" + f.replace("'", "''") + "'" for f in files) + "], union_by_name = true)"
    con = duckdb.connect()
    flows = con.execute(f"select coalesce(sum(flows), 0) from {src}").fetchone()[0]
    dups = con.execute(f"select count(*) from (select source_file, exporter, observation_domain, version from {src} "
                       "group by all having count(*) > 1)").fetchone()[0]
    return int(flows), dups


def compare(cfg) -> dict:
    spool = cfg.path("nfcapd")
    expected = {}
    for f in sorted(spool.rglob("nfcapd.*")):
        if ".current." in f.name or not f.is_file():
            continue
        tot = file_totals_nfdump(f)
        if tot is not None and tot[0] > 0:
            expected[str(f.relative_to(spool))] = tot
    got = lake_per_file(cfg.lake)
    mismatched = {k: (v, got.get(k)) for k, v in expected.items() if got.get(k) != v}
    extra = {k: v for k, v in got.items() if k not in expected}
    health_flows, health_dups = lake_health(cfg.lake)
    return {
        "files": len(expected),
        "flows_nfcapd": sum(v[0] for v in expected.values()),
        "flows_lake": sum(v[0] for v in got.values()),
        "packets_nfcapd": sum(v[1] for v in expected.values()),
        "packets_lake": sum(v[1] for v in got.values()),
        "bytes_nfcapd": sum(v[2] for v in expected.values()),
        "bytes_lake": sum(v[2] for v in got.values()),
        "mismatched_files": mismatched,
        "unexpected_files": extra,
        "duplicates": lake_duplicates(cfg.lake),
        "health_flows_lake": health_flows,
        "health_duplicates": health_dups,
    }


def run(flows: int, faults: int, seed: int, send_seconds: float, settle_timeout: float, log=print) -> dict:
    home = Path(tempfile.mkdtemp(prefix="flowlake-faults-"))

    os.environ.update(private_env(home))
    from .collectors.traffic import api as traffic  # noqa: PLC0415  (start-up: numpy, scipy)

    config.reset()
    cfg = config.get()
    rng = random.Random(seed)
    managed = {name: components.get(cfg, name).managed() for name in COMPONENTS}
    log(f"faults: home {home}; {flows:,} flows over ~{send_seconds:.0f}s, {faults} faults")
    stack.up_stack(cfg, with_superset=False)
    done = threading.Event()
    errors: list[BaseException] = []

    def sender():
        try:
            traffic.generate_day(target=("127.0.0.1", cfg.collector.port), start=1_763_596_800_000,
                                 duration_s=3600, flows=flows, protocol="v9", seed=seed, cfg=cfg,
                                 max_rate=max(1000.0, flows / send_seconds))
        except BaseException as exc:  # reported after the run
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    history = []
    order = []  # every component in turn, in a random order each round
    while len(order) < faults:
        round_ = list(COMPONENTS)
        rng.shuffle(round_)
        order += round_
    interval = send_seconds / max(1, faults)
    for i in range(faults):
        time.sleep(rng.uniform(0.3, 1.0) * interval)
        victim = order[i]
        t0 = time.monotonic()
        managed[victim].kill()
        time.sleep(rng.uniform(0.2, 2.0))
        stack.up_stack(cfg, with_superset=False)
        history.append({"fault": i + 1, "killed": victim, "recovered_s": round(time.monotonic() - t0, 1)})
        log(f"  fault {i + 1}/{faults}: SIGKILL {victim}, back in {history[-1]['recovered_s']}s")
    done.wait()
    if errors:
        raise errors[0]
    # Let nfcapd rotate its last file, then wait for the lake to match nfcapd's files.
    time.sleep(cfg.collector.rotate_seconds + 2)
    deadline = time.monotonic() + settle_timeout
    result = compare(cfg)
    while time.monotonic() < deadline:
        stack.up_stack(cfg, with_superset=False)  # anything that died of its own
        result = compare(cfg)
        if not result["mismatched_files"] and not result["unexpected_files"] and result["flows_nfcapd"] > 0 \
                and result["health_flows_lake"] == result["flows_nfcapd"]:
            break
        time.sleep(3)
    result["faults"] = history
    result["home"] = str(home)
    result["ok"] = (not result["mismatched_files"] and not result["unexpected_files"]
                    and result["duplicates"] == 0 and result["flows_nfcapd"] > 0)
    stack.down_stack(cfg)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flowlake.faults", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--soak", action="store_true", help="the long run: 1.2M flows, 20 faults")
    ap.add_argument("--flows", type=int, default=None)
    ap.add_argument("--faults", type=int, default=None)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    flows = args.flows or (1_200_000 if args.soak else 120_000)
    faults = args.faults or (20 if args.soak else 4)
    send_seconds = 600 if args.soak else 60
    res = run(flows, faults, args.seed, send_seconds, settle_timeout=900 if args.soak else 400)
    if args.json:
        print(json.dumps(res, indent=2, default=str))
    else:
        print(f"files {res['files']}, faults {len(res['faults'])}")
        for k in ("flows", "packets", "bytes"):
            print(f"  {k:8s} nfcapd wrote {res[k + '_nfcapd']:>14,}   in the lake {res[k + '_lake']:>14,}")
        print(f"  duplicates {res['duplicates']}, mismatched files {len(res['mismatched_files'])}, "
              f"unexpected files {len(res['unexpected_files'])}")
        print("EXACTLY ONCE: OK" if res["ok"] else "EXACTLY ONCE: FAILED")
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
