"""A lab killed with SIGKILL cannot clean up after itself: its namespaces, the drop and
NFQUEUE rules in them, its servers, softflowd and NetFlow relay stay. A rerun (or
`flowlake lab clean`) finds them by the dead lab's owner record, removes them and says
so, leaves a live lab alone, and the grid resumes; `flowlake status` shows them meanwhile.
A tiny real study (no stack: --no-publish; the NetFlow export runs, into a closed port)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from lab_home import lab_home  # noqa: E402

pytestmark = pytest.mark.integration
FLOWLAKE = [sys.executable, "-m", "flowlake.cli"]
SPEC = """
study = "leftover"
duration_s = 2
repetitions = 1

[topology.paths.a]
rate = "10mbit"
queue_ms = 50
delay_ms = 5          # delay lines and NFQUEUE rules

[conditions.clean]
[conditions.loss1pct]
loss_percent = 1.0    # an nftables table in the server's namespace

[[grid]]
kind = "paced"
protocol = ["udp"]
frame_size = [200]
rate = [100]
conditions = ["clean", "loss1pct"]

[[grid]]
kind = "bulk"
protocol = ["tcp"]
congestion_control = ["cubic"]
conditions = ["clean"]
"""


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _in_ns(ns: str, *cmd) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True).stdout


def _alive(pid: int) -> bool:
    from flowlake.collectors.lab.leftovers import alive

    return alive(pid)


def _kill_mid_run(env, spec: Path, after: int, *extra) -> tuple[int, dict]:
    """Run the study until the endpoint server of its run number `after`+1 is up, SIGKILL
    it there (faults point lab.server_up), and return its pid and owner record."""
    res = subprocess.Popen([*FLOWLAKE, "lab", "run", str(spec), "--no-publish", *extra], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           env={**env, "FLOWLAKE_FAULT": "lab.server_up:KILL", "FLOWLAKE_FAULT_AFTER": str(after)})
    _, err = res.communicate(timeout=180)
    assert res.returncode == -signal.SIGKILL, err
    record = Path(env["FLOWLAKE_HOME"]) / "state" / "lab" / "owners" / f"{res.pid}.json"
    assert record.exists(), f"no owner record left by the killed lab:\n{err}"
    return res.pid, json.loads(record.read_text())


@pytest.fixture(scope="module")
def lab_env(tmp_path_factory):
    return lab_home(tmp_path_factory, "lab-leftovers", SPEC)


@pytest.mark.root
def test_a_killed_lab_is_cleaned_up_by_the_rerun_which_resumes(lab_env):
    env, spec = lab_env
    home = Path(env["FLOWLAKE_HOME"])
    pid, rec = _kill_mid_run(env, spec, after=1)  # in the second run (loss1pct), its server up
    client, server = rec["namespaces"]
    # what a SIGKILL leaves: the namespaces, the rules in them, processes running in them
    assert {client, server} <= _netns()
    assert "fl_drop_" in _in_ns(server, "nft", "list", "tables")
    assert "NFQUEUE" in _in_ns(server, "iptables", "-t", "mangle", "-S", "PREROUTING")
    left = {ns: subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for ns in (client, server)}
    assert left[client] and left[server], left  # softflowd + relay; the endpoint server
    pids = [int(p) for p in left[client] + left[server]]
    cmdlines = " ".join(Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ") for p in pids if _alive(p))
    assert "softflowd" in cmdlines and "endpoint server" in cmdlines, cmdlines
    window = rec["open_window"]  # the killed run's flow window, left open in the registry
    from flowlake.collectors.lab.tag import load

    registry = home / "state" / "lab_runs.jsonl"
    assert load(registry)[window["run_id"]][2] > time.time() * 1000 + 3600_000

    status = subprocess.run([*FLOWLAKE, "status", "--json"], env=env, capture_output=True, text=True, timeout=180)
    lab = json.loads(status.stdout)["lab"]
    assert sorted(lab["leftover_namespaces"]) == sorted([client, server]), lab
    assert "LEFT BY KILLED LABS" in lab["line"] and "flowlake lab clean" in lab["line"]

    # the rerun: removes what the dead lab left, and a `lab clean` meanwhile leaves it alone
    rerun = subprocess.Popen([*FLOWLAKE, "lab", "run", str(spec), "--no-publish", "--json"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    mine = home / "state" / "lab" / "owners" / f"{rerun.pid}.json"
    deadline = time.time() + 120
    while rerun.poll() is None and time.time() < deadline and not (
            mine.exists() and len(json.loads(mine.read_text())["namespaces"]) == 2
            and set(json.loads(mine.read_text())["namespaces"]) <= _netns()):
        time.sleep(0.2)
    live = json.loads(mine.read_text())["namespaces"]
    clean = subprocess.run([*FLOWLAKE, "lab", "clean", "--json"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["labs"] == 0  # the live lab is no dead lab's
    assert set(live) <= _netns()
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert f"lab: removed what a killed lab (pid {pid}) left: namespace {client}" in err
    assert f"namespace {server}" in err and f"run window of {window['run_id']} closed" in err
    assert "1 already done" in err  # the first run's marker survived the kill; the grid resumes
    summary = json.loads(out)
    assert (summary["runs"], summary["done"], summary["pending"]) == (3, 3, 0)
    assert not ({client, server, *live} & _netns())
    time.sleep(0.5)
    assert not [p for p in pids if _alive(p)], "processes of the killed lab still run"
    assert not (home / "state" / "lab" / "owners" / f"{pid}.json").exists() and not mine.exists()
    end = load(registry)[window["run_id"]][2]
    assert window["start"] <= end <= time.time() * 1000  # the killed run's window is closed

    status = subprocess.run([*FLOWLAKE, "status", "--json"], env=env, capture_output=True, text=True, timeout=180)
    assert json.loads(status.stdout)["lab"]["leftover_namespaces"] == []


@pytest.mark.root
def test_lab_clean_removes_what_a_killed_lab_left(lab_env):
    env, spec = lab_env
    _, rec = _kill_mid_run(env, spec, 0, "--fresh")
    assert set(rec["namespaces"]) <= _netns()
    res = subprocess.run([*FLOWLAKE, "lab", "clean", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["labs"] == 1 and {f"namespace {ns}" for ns in rec["namespaces"]} <= {
        r.split(" (")[0] for r in out["removed"]}, out
    assert not (set(rec["namespaces"]) & _netns())
    again = subprocess.run([*FLOWLAKE, "lab", "clean"], env=env, capture_output=True, text=True, timeout=60)
    assert "nothing left by killed labs" in again.stdout


def test_a_record_of_a_reused_pid_is_a_dead_labs(tmp_path, cfg):
    """A pid alive but started at another time is not the lab that wrote the record."""
    from flowlake.collectors.lab import leftovers

    owners = leftovers.owners_dir(cfg)
    owners.mkdir(parents=True, exist_ok=True)
    me = os.getpid()
    started = leftovers.process_start(me)
    (owners / "reused.json").write_text(json.dumps({"pid": me, "started": started + 1, "namespaces": ["fl-lab-x"]}))
    (owners / "live.json").write_text(json.dumps({"pid": me, "started": started, "namespaces": ["fl-lab-y"]}))
    try:
        dead = leftovers.find(cfg)["dead"]
        assert [Path(r["record"]).name for r in dead] == ["reused.json"]
        assert dead[0]["present"] == []
    finally:
        for name in ("reused.json", "live.json"):
            (owners / name).unlink(missing_ok=True)
