"""`flowlake import` (flowlake/importer.py, collectors/shipper/import.go) beside the live stack.

With the stack down, a first import starts Kafka and the ingest itself. Then the stack
runs (`flowlake up`: live shipper, nfcapd) and ingests live NetFlow from softflowd while
`flowlake import` reads a multi-day nfdump archive: a nested
YYYY/MM/DD tree written by a real nfcapd fed by the traffic model, in every compression
nfdump 1.7.1 writes (none, LZ4, LZO, BZ2), plus a truncated nfcapd file, a text file and a
recompressed copy of an imported file. The import is SIGKILLed mid-way and run again.
The lake must hold the live flows (nfdump's count of the spool) and the archive's flows
(nfdump's count of each good file, flow for flow against the shipper's own decode),
nothing twice; the bad files are quarantined with their reasons, the archive untouched;
the daily report of every imported date is rebuilt.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import nfcapd_capture  # noqa: E402
import pcapgen  # noqa: E402
from flowlake.base.ports import private_env  # noqa: E402
from test_e2e import FLOWLAKE, closed_files, nfdump_totals, send_softflowd  # noqa: E402
from test_e2e import lake as e2e_lake  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
DAYS = [dt.date(2025, 3, 1), dt.date(2025, 3, 2), dt.date(2025, 3, 3)]


def nfdump(*args) -> None:
    subprocess.run(["nfdump", *map(str, args)], check=True, capture_output=True)


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> dict:
    """An nfdump archive tree; returns its root and which files are good, copies, bad."""
    from flowlake.collectors.traffic import api

    work = tmp_path_factory.mktemp("captures")
    root = tmp_path_factory.mktemp("archive")
    good, bad = [], []
    for i, day in enumerate(DAYS):
        start = dt.datetime.combine(day, dt.time(10), dt.timezone.utc)
        cap, _ = nfcapd_capture.capture(
            work / f"cap{i}",
            lambda port, start=start, i=i: api.generate_day(("127.0.0.1", port), start, 600, 3000, "ipfix", seed=40 + i),
            ["-y"] if i == 2 else [])  # the last day as nfcapd wrote it (LZ4)
        folder = root / f"{day:%Y/%m/%d}"
        folder.mkdir(parents=True)
        if i == 2:
            target = folder / f"nfcapd.{day:%Y%m%d}1000"
            target.write_bytes(cap.read_bytes())
            good.append(target)
            continue
        # two files a day, each in another compression: none + LZ4, LZO + BZ2
        for j, (flag, flt) in enumerate(zip([("", "-y"), ("-z", "-j")][i], ("proto tcp", "not proto tcp"))):
            target = folder / f"nfcapd.{day:%Y%m%d}10{j * 5:02d}"
            nfdump("-r", cap, *([flag] if flag else []), "-w", target, flt)
            good.append(target)
    # a truncated nfcapd file, a text file, and the same flows as a good file in another compression
    truncated = root / f"{DAYS[2]:%Y/%m/%d}" / f"nfcapd.{DAYS[2]:%Y%m%d}1010"
    truncated.write_bytes(good[0].read_bytes()[: good[0].stat().st_size * 2 // 3])
    text = root / "2025" / "README.txt"
    text.write_text("nfsen archive of router1\n")
    copy = root / "copy" / "nfcapd.202503011000"
    copy.parent.mkdir()
    nfdump("-r", good[0], "-j", "-w", copy)
    bad += [truncated, text]
    for f in good:
        assert nfdump_totals([f])["flows"] > 100, f
    return {"root": root, "good": good, "bad": bad, "copy": copy}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A private home whose stack starts DOWN: the first import starts what it needs."""
    home = tmp_path_factory.mktemp("import-home")
    env = {**os.environ, **private_env(home), "TZ": "UTC"}
    try:
        yield {"env": env, "home": home, "port": int(env["FLOWLAKE_COLLECTOR_PORT"])}
    finally:
        subprocess.run([*FLOWLAKE, "down"], env=env, capture_output=True, timeout=300)


def lake(stack, sql: str) -> list:
    return e2e_lake(stack, sql) or []  # through the Delta table (test_e2e.lake)


def import_state(stack) -> dict:
    try:
        return json.loads((stack["home"] / "state" / "import.json").read_text())
    except (OSError, ValueError):
        return {}


def shipper_dump(path: Path) -> list[tuple]:
    """The shipper's own decode of a file: what the lake must hold, flow for flow."""
    from flowlake.collectors import ship

    res = subprocess.run([str(ship.BINARY), "dump", str(path)], capture_output=True, text=True, check=True)
    return sorted((r["file_seq"], r["src_addr"], r["dst_addr"], r["src_port"], r["dst_port"], r["proto"],
                   r["packets"], r["bytes"], r["time_start"])
                  for r in map(json.loads, res.stdout.splitlines()))


def wait_for(check, timeout: float, what: str, interval: float = 2.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def test_archive_import_beside_live_stack_killed_and_rerun(stack, archive, tmp_path):
    env = stack["env"]
    root, good, bad = archive["root"], archive["good"], archive["bad"]
    pcap = tmp_path / "live.pcap"
    pcapgen.write_pcap(pcap, 3000, seed=71)

    # 0. the stack is down: importing the first day starts Kafka and the ingest, and says so
    res = subprocess.run([*FLOWLAKE, "import", "--no-reports", str(root / f"{DAYS[0]:%Y/%m/%d}")], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "Kafka is not running: starting the local broker" in res.stderr, res.stderr
    assert "the ingest is not running: starting it" in res.stderr, res.stderr
    assert "2 files imported" in res.stderr, res.stderr
    first_day = import_state(stack)["files_shipped"]
    assert first_day == 2
    up = subprocess.run([*FLOWLAKE, "up", "--no-superset"], env=env, capture_output=True, text=True, timeout=400)
    assert up.returncode == 0, up.stderr  # the live part: shipper and nfcapd join Kafka and the ingest

    # 1. import (throttled so the kill lands mid-way) while live NetFlow flows in
    proc = subprocess.Popen([*FLOWLAKE, "import", "--no-reports", "--throttle", "1000", str(root)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        send_softflowd(stack, pcap, 9)
        wait_for(lambda: import_state(stack).get("files_shipped", 0) >= first_day + 2 or proc.poll() is not None,
                 120, "the import to ship two more files", interval=0.1)
        assert proc.poll() is None, f"the import ended before the kill: {proc.communicate()[0]}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed = import_state(stack)
    assert killed["state"] == "importing", killed
    assert first_day + 2 <= killed["files_shipped"] < len(good), killed

    # 2. more live traffic, and the rerun: it finishes the archive and rebuilds a report per day
    pcapgen.write_pcap(pcap, 2000, seed=72, ipv6_share=0.5)
    send_softflowd(stack, pcap, 10)
    res = subprocess.run([*FLOWLAKE, "import", "--job", "traffic_totals", str(root)], env=env,
                         capture_output=True, text=True, timeout=900)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    # what the killed run committed is skipped (its state file may lag the ledger by a file)
    assert out.count("already imported (ledger)") >= killed["files_shipped"], out
    assert f"skipped {archive['copy']}: already shipped (the same flows as" in out, out
    for f in bad:
        assert f"quarantined {f}:" in out, out
    assert "flows imported per day" in out
    for day in DAYS:  # every date gets its report, also those the killed run imported
        assert f"reports for {day}: 1 jobs ok" in out, out

    # 3. the lake: live part = nfdump's count of the spool; archive part = each good file
    def live_landed():
        ref = nfdump_totals(closed_files(stack))
        got = lake(stack, "select count(*) from flows where source_file not like '/%'")[0][0]
        return ref["flows"] > 3000 and got == ref["flows"] and ref

    live_ref = wait_for(live_landed, 240, "the live flows to land")
    per_file = dict(lake(stack, "select source_file, count(*) from flows where source_file like '/%' group by 1"))
    for f in good:
        assert per_file.get(str(f)) == nfdump_totals([f])["flows"], f
    assert set(per_file) == {str(f) for f in good}, "only the good archive files, each once"
    for f in good:
        rows = lake(stack, f"select file_seq, src_addr, dst_addr, src_port, dst_port, proto, packets, bytes, "
                           f"epoch_ms(time_start) from flows where source_file = '{f}' order by file_seq")
        assert sorted(map(tuple, rows)) == shipper_dump(f), f"{f}: the lake differs from the file"
    dup = lake(stack, "select source_file, file_seq, count(*) c from flows group by all having c > 1 limit 5")
    assert dup == [], f"flows doubled in the lake: {dup}"
    total = lake(stack, "select count(*) from flows")[0][0]
    assert total == live_ref["flows"] + sum(nfdump_totals([f])["flows"] for f in good)

    # 4. the bad files: quarantined copies with reasons; the archive is left as it was
    qdir = stack["home"] / "lake" / "quarantine" / "nfcapd"
    reasons = {r.read_text().splitlines()[0].removeprefix("file: "): r.read_text() for r in qdir.glob("*.reason")}
    for f in bad:
        assert str(f) in reasons, reasons.keys()
        assert "nfdump 1.7 cannot read it either" in reasons[str(f)]
        assert f.exists()
    assert "truncated" in reasons[str(bad[0])] and "bad magic" in reasons[str(bad[1])]

    # 5. a report per imported date, holding exactly that day's archive flows
    for day in DAYS:
        part = stack["home"] / "lake" / "reports" / "traffic_totals" / f"date={day}"
        got = duckdb.sql(f"select max(flows) from read_parquet('{part}/*.parquet') "
                         "where direction = 'all' and exporter = 'all'").fetchone()[0]
        want = lake(stack, f"select count(*) from flows where date = '{day}'")[0][0]
        assert got == want > 0, day

    # 6. a third run ships nothing; `flowlake status` shows the import
    res = subprocess.run([*FLOWLAKE, "import", "--no-reports", str(root)], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "0 files imported" in res.stderr and "0 quarantined" in res.stderr, res.stderr
    st = json.loads(subprocess.run([*FLOWLAKE, "status", "--json"], env=env, capture_output=True, text=True).stdout)
    imp = st["counts"]["import"]
    assert imp["files_shipped"] == len(good) and imp["state"] == "stopped", imp
    assert imp["flows_shipped"] == sum(per_file.values())


def test_external_kafka_down_says_what_to_start(tmp_path):
    """With kafka.bootstrap pointing at a broker that is down, nothing is started and
    the error names the broker and the setting."""
    from flowlake.base.ports import free_port, private_env

    port = free_port()
    env = {**os.environ, **private_env(tmp_path / "home"), "FLOWLAKE_KAFKA_BOOTSTRAP": f"127.0.0.1:{port}"}
    (tmp_path / "a").mkdir()
    res = subprocess.run([*FLOWLAKE, "import", str(tmp_path / "a")], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode != 0
    assert f"Kafka at 127.0.0.1:{port} (kafka.bootstrap) is not reachable: start that broker" in res.stderr, res.stderr
    assert not (tmp_path / "home" / "run" / "kafka.pid").exists()
