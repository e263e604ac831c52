"""Retention in the running stack, with tiny settings, over simulated past days, on a
size-limited tmpfs as FLOWLAKE_HOME:
  - the retention service `flowlake up` starts runs a pass at once (seeded tiers expire by
    their own keys) and Kafka's topics carry kafka_hours / kafka_bytes;
  - spool files go only once their flows are in the lake: a file the ingest has not
    written yet, or the shipper has not shipped, stays; lake days past flows_days go;
    a dry run removes nothing and lists what the run then removes;
  - above the high-water mark the oldest raw day that has rollups goes (and no more);
  - below the floor nfcapd keeps writing, the shipper and the ingest pause, jobs refuse,
    and once space returns everything resumes and every flow reaches the lake once.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import smallfs  # noqa: E402
from test_e2e import FLOWLAKE, _up, closed_files, lake, nfdump_totals, status  # noqa: E402

from flowlake.base.ports import private_env  # noqa: E402
from flowlake.base.process import wait_until  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
TODAY = dt.datetime.now(dt.timezone.utc).date()
MIB = 1 << 20
RETENTION = {"FLOWS_DAYS": "3", "QUARANTINE_DAYS": "2", "SPOOL_GRACE_HOURS": "0", "KAFKA_HOURS": "2",
             "KAFKA_BYTES": str(64 * MIB), "ROLLUP_1M_DAYS": "2", "ROLLUP_5M_DAYS": "5", "ROLLUP_1H_DAYS": "0",
             "DISK_HIGH_WATER_PCT": "70", "DISK_FLOOR_PCT": "20"}


def day(n: int) -> str:
    return (TODAY - dt.timedelta(days=n)).isoformat()


def seed(home: Path, rel: str, size: int = 2000) -> Path:
    path = home / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


def seed_flows_day(home: Path, date: str, size: int) -> Path:
    """A day of `size` bytes in the Delta table lake/flows: one incompressible file in its
    hour folder, committed as a writer of its own does (the disk guard sees the table's files)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from flowlake.base import delta
    from flowlake.pipelines import flow_ingest

    path = home / "lake" / "flows" / f"date={date}" / "hour=12" / "filler.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = size // 4096
    pq.write_table(pa.table({"source_file": [os.urandom(2048).hex() for _ in range(rows)]}), path,
                   compression="none", use_dictionary=False)
    assert delta.commit_batch_files(home / "lake" / "flows", [(path, {"date": date, "hour": 12})],
                                    flow_ingest.table_schema(), flow_ingest.PARTITION_BY, f"filler-{date}", 0)
    return path


SEEDED_GONE = [f"lake/rollups/1m/date={day(4)}", f"lake/rollups/5m/date={day(9)}",
               f"lake/quarantine/lake/flows/date={day(6)}"]
SEEDED_KEPT = [f"lake/rollups/1m/date={day(1)}", f"lake/rollups/5m/date={day(4)}",
               f"lake/rollups/1h/date={day(3000)}", f"lake/reports/top_talkers/date={day(3000)}"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with smallfs.tmpfs(tmp_path_factory.mktemp("retention") / "home", 512) as home:
        for rel in SEEDED_GONE + SEEDED_KEPT:
            seed(home, rel + "/part-0.parquet")
        env = {**os.environ, **private_env(home), "TZ": "UTC",
               **{f"FLOWLAKE_RETENTION_{k}": v for k, v in RETENTION.items()}}
        st = {"env": env, "home": home, "port": int(env["FLOWLAKE_COLLECTOR_PORT"])}
        try:
            _up(st)
            yield st
        finally:
            for name in ("shipper", "ingest"):
                signal_component(st, name, signal.SIGCONT)
            subprocess.run([*FLOWLAKE, "down"], env=env, capture_output=True, timeout=300)


def signal_component(stack, name: str, sig: int) -> None:
    try:
        pid = json.loads((stack["home"] / "run" / f"{name}.pid").read_text())["pid"]
        os.killpg(pid, sig)
    except (OSError, ValueError, KeyError):
        pass


def flowlake(stack, *args, env=None) -> subprocess.CompletedProcess:
    res = subprocess.run([*FLOWLAKE, *args], env={**stack["env"], **(env or {})}, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, f"flowlake {' '.join(args)}:\n{res.stdout}\n{res.stderr}"
    return res


def generate(stack, days_ago: int, flows: int, seed_: int) -> None:
    """An hour of modelled traffic on a past day (one lake partition: the ingest stays quick)."""
    flowlake(stack, "generate", "--start", f"{day(days_ago)}T12:00", "--duration", "1h", "--flows", str(flows),
             "--seed", str(seed_), "--max-rate", "50000")


def ledger(stack) -> dict:
    from flowlake.base import config
    from flowlake.collectors import ship

    return ship.read_ledger(config.load(env=stack["env"]))


def new_files_settled(stack, known: set[Path], timeout: float = 120) -> dict[Path, int]:
    """Closed spool files not in `known` that hold flows, once nfcapd has rotated twice
    without adding any: {file: flows}."""
    last, deadline = None, time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = {f: nfdump_totals([f])["flows"] for f in closed_files(stack) if f not in known}
        files = {f: n for f, n in files.items() if n}
        if files and files == last:
            return files
        last = files
        time.sleep(4.5)  # two rotations (rotate_seconds=2)
    raise AssertionError(f"nfcapd wrote no settled new files in {timeout}s: {last}")


def lake_rows(stack, files) -> dict[str, int]:
    names = [str(f.relative_to(stack["home"] / "nfcapd")) for f in files]
    if not names:
        return {}
    rows = lake(stack, "select source_file, count(*) from flows where source_file in ("
                + ", ".join(f"'{n}'" for n in names) + ") group by 1") or []
    return dict(rows)


def wait_in_lake(stack, files: dict[Path, int], timeout: float = 300) -> None:
    want = {str(f.relative_to(stack["home"] / "nfcapd")): n for f, n in files.items()}
    wait_until(lambda: lake_rows(stack, files) == want, timeout, f"the lake to hold {sum(want.values())} flows "
               f"of {len(want)} spool files exactly")


def retention(stack, dry: bool, env=None) -> dict:
    return json.loads(flowlake(stack, "retention", "--json", *(["--dry-run"] if dry else []), env=env).stdout)


def tree(home: Path) -> set[str]:
    return {str(p.relative_to(home)) for p in home.rglob("*")
            if not str(p.relative_to(home)).startswith(("log", "kafka", "state", "run"))}


def test_service_runs_a_pass_at_start_and_kafka_topics_are_bounded(stack):
    home = stack["home"]
    wait_until((home / "state" / "retention" / "last.json").exists, 60, "the retention service's first pass")
    for rel in SEEDED_GONE:
        assert not (home / rel).exists(), f"{rel} outlived its key"
    for rel in SEEDED_KEPT:
        assert (home / rel).exists(), f"{rel} should be kept"
    st = status(stack)
    assert st["components"]["retention"]["state"] == "running"
    flows_topic = st["retention"]["kafka_topics"]["flows.v1"]
    assert flows_topic["retention.ms"] == str(2 * 3600_000)
    assert flows_topic["retention.bytes"] == str(64 * MIB // 4)  # split over 4 partitions
    tiers = {t["tier"]: t for t in st["retention"]["tiers"]}
    assert tiers["rollup_1h"]["oldest"] == day(3000) and tiers["rollup_1h"]["limit"] == "forever"
    assert tiers["reports"]["limit"] == "kept" and tiers["reports"]["units"] == 1
    text = flowlake(stack, "status", env={"COLUMNS": "200"}).stdout
    assert "storage per tier" in text and "kafka flows.v1: retention 2 h" in text and "high water 70%" in text
    # existing topics take a changed setting on the next run
    three = retention(stack, dry=False, env={"FLOWLAKE_RETENTION_KAFKA_HOURS": "3"})["kafka"]["flows.v1"]
    assert three["set"]["retention.ms"] == str(3 * 3600_000) and three["changed"]
    assert status(stack)["retention"]["kafka_topics"]["flows.v1"]["retention.ms"] == str(3 * 3600_000)
    retention(stack, dry=False)  # back to the stack's own settings


def test_spool_files_go_only_once_their_flows_are_in_the_lake(stack):
    home = stack["home"]
    for n in (4, 3, 2, 1):                                 # four past days
        generate(stack, n, 3000, 30 + n)
    first = new_files_settled(stack, set())
    wait_in_lake(stack, first)
    per_day_before = dict(lake(stack, "select cast(date as varchar), count(*) from flows group by 1"))
    assert set(per_day_before) == {day(n) for n in (4, 3, 2, 1)}

    signal_component(stack, "ingest", signal.SIGSTOP)     # the ingest falls behind
    try:
        known = set(closed_files(stack))
        generate(stack, 2, 2000, 36)
        shipped = new_files_settled(stack, known)
        wait_until(lambda: all(f.name in ledger(stack) for f in shipped), 60, "the shipper to ship")
        signal_component(stack, "shipper", signal.SIGSTOP)  # ... and the shipper too
        known = set(closed_files(stack))
        generate(stack, 1, 1500, 37)
        unshipped = new_files_settled(stack, known)
        assert not any(f.name in ledger(stack) for f in unshipped)
        counts = {f: n for f in closed_files(stack) if (n := nfdump_totals([f])["flows"])}
        in_lake = lake_rows(stack, counts)  # the lake stands still while the ingest is stopped

        before = tree(home)
        dry = retention(stack, dry=True)
        assert before <= tree(home), "the dry run removed something"  # (nfcapd keeps adding files)
        done = retention(stack, dry=False)
        assert [u["path"] for u in done["remove"]] == [u["path"] for u in dry["remove"]]
    finally:
        signal_component(stack, "shipper", signal.SIGCONT)
        signal_component(stack, "ingest", signal.SIGCONT)

    gone = [Path(u["path"]) for u in done["remove"] if u["tier"] == "spool"]
    assert set(first) <= set(gone), "files already in the lake stayed (grace is 0)"
    assert not set(gone) & (set(shipped) | set(unshipped)), "a file not yet in the lake was deleted"
    assert all(f.exists() for f in list(shipped) + list(unshipped)) and not any(f.exists() for f in gone)
    for f in gone:  # every deleted file had all its flows in the lake when it went
        # by its path below the spool (source_file): sfcapd's sflow/ files share nfcapd's names
        assert in_lake.get(str(f.relative_to(home / "nfcapd")), 0) == counts.get(f, 0), f
    lake_gone = {u["path"] for u in done["remove"] if u["tier"] == "flows"}
    assert lake_gone == {str(home / "lake" / "flows" / f"date={day(4)}")}  # flows_days=3: day 3 stays
    per_day = dict(lake(stack, "select cast(date as varchar), count(*) from flows group by 1"))
    assert per_day == {d: n for d, n in per_day_before.items() if d != day(4)}

    wait_in_lake(stack, {**shipped, **unshipped})          # both caught up: exactly once
    later = retention(stack, dry=False)
    later_gone = {Path(u["path"]) for u in later["remove"] if u["tier"] == "spool"}
    assert set(shipped) | set(unshipped) <= later_gone


def test_above_high_water_the_oldest_rolled_up_day_goes(stack):
    home = stack["home"]
    for n in (3, 2):  # raw days that have rollups (1m is kept 2 days, so day 3 needs 5m and 1h only)
        seed_flows_day(home, day(n), 12 * MIB)
        for res in ("5m", "1h") + (("1m",) if n <= 2 else ()):
            seed(home, f"lake/rollups/{res}/date={day(n)}/part-0.parquet")
    used, total = smallfs.usage(home)
    smallfs.fill_to(home, home / "ballast", 100 * (0.70 * total + 6 * MIB) / total)
    wait_until(lambda: not (home / "lake" / "flows" / f"date={day(3)}" / "hour=12" / "filler.parquet").exists(), 90,
               "the disk guard to remove the oldest rolled-up day (DELETE, then VACUUM at once)")
    assert lake(stack, f"select count(*) from flows where date = '{day(3)}'") == [(0,)]
    time.sleep(3)
    assert (home / "lake" / "flows" / f"date={day(2)}" / "hour=12" / "filler.parquet").exists(), \
        "more went than the mark needed"
    assert lake(stack, f"select count(*) from flows where date = '{day(2)}'")[0][0] > 0, "more went than needed"
    assert (home / "lake" / "flows" / f"date={day(1)}").exists(), "a day without rollups went"
    assert (home / "lake" / "rollups" / "1h" / f"date={day(3)}").exists()
    assert status(stack)["retention"]["disk"]["level"] == "ok"
    for res in ("1m", "5m", "1h"):  # day 2 is whole raw flows again for the next test
        shutil.rmtree(home / "lake" / "rollups" / res / f"date={day(2)}")


def test_below_the_floor_the_collector_spools_and_the_rest_pauses_then_resumes(stack):
    home = stack["home"]
    before_rows = lake(stack, "select count(*) from flows")[0][0]
    # free 6% < floor 20%; stopping the ingest frees its Spark temp folder (home/tmp/spark, ~9%
    # of this small disk) and still leaves it below the floor
    smallfs.fill_to(home, home / "ballast", 94)
    wait_until(lambda: {c: status(stack)["components"][c]["state"] for c in ("shipper", "ingest")}
               == {"shipper": "paused", "ingest": "paused"}, 120, "the disk guard to pause shipper and ingest")
    st = status(stack)
    assert st["components"]["nfcapd"]["state"] == "running"
    assert "below retention.disk_floor_pct=20" in (st["retention"]["alarm"] or ""), st["retention"]["disk"]
    assert "PAUSED" in flowlake(stack, "status", env={"COLUMNS": "200"}).stdout
    up = flowlake(stack, "up", "--no-superset")  # an operator's `up` does not override the guard
    assert "paused by the disk guard" in up.stderr and status(stack)["components"]["shipper"]["state"] == "paused"

    known = set(closed_files(stack))
    generate(stack, 1, 3000, 38)
    spooled = new_files_settled(stack, known)     # nfcapd kept receiving
    assert sum(spooled.values()) > 2500
    assert not any(f.name in ledger(stack) for f in spooled)
    assert lake(stack, "select count(*) from flows")[0][0] == before_rows
    plan = retention(stack, dry=False)            # a pass during the pause never takes unshipped files
    assert all(f.exists() for f in spooled) and not any(Path(u["path"]) in spooled for u in plan["remove"])

    (home / "ballast").unlink()
    wait_until(lambda: not (home / "state" / "retention" / "paused.json").exists(), 120, "the guard to resume")
    wait_in_lake(stack, spooled)                  # nothing lost, nothing doubled
    assert lake(stack, "select count(*) from flows")[0][0] == before_rows + sum(spooled.values())
    st = status(stack)
    assert st["components"]["shipper"]["state"] == "running" and st["components"]["ingest"]["state"] == "running"
    assert st["retention"]["paused"] is None and st["retention"]["alarm"] is None
