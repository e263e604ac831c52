"""The warm query server (issue 22, jobs/query/server.py): a `flowlake query` handed to
it prints exactly what the command prints answering itself (stdout, stderr, exit status),
the command itself loads none of the engine, help and errors stay click's, `| head` ends
as it does without the server, and a dead server's stale socket costs nothing but time.

Real processes throughout: the console script and `flowlake query-server`, over a day of
synthetic flows written as the compactor writes hours (bench/query.py's writer)."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_query_fast import QUESTIONS, _bench, _env, probe

FLOWLAKE = str(Path(sys.executable).with_name("flowlake"))
# the console script, reporting whether it loaded DuckDB itself before its process ended
PROBE = probe(("click", "_duckdb"))


@pytest.fixture(scope="module")
def home(tmp_path_factory, cfg) -> Path:
    bench = _bench()
    home = tmp_path_factory.mktemp("qserver")
    bench.write_lake(bench.synth(24_000, seed=11), home)
    return home


def _start(home: Path) -> subprocess.Popen:
    proc = subprocess.Popen([FLOWLAKE, "query-server"], env=_env(home), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    sock = home / "run" / "query.sock"
    deadline = time.monotonic() + 60
    # this process listening, not only a socket present: a stale file of a killed server, or
    # the module's other server, answers until the new one has taken the socket over (it
    # writes its state, with its pid, after it listens); under load the next command raced it
    while not (_listening(sock) and _state_pid(home) == proc.pid):
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the query server did not listen on its socket"
        time.sleep(0.1)
    return proc


def _state_pid(home: Path) -> int | None:
    try:
        return _state(home).get("pid")
    except (OSError, ValueError):
        return None


def _listening(sock: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(sock))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def server(home):
    proc = _start(home)
    yield proc
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)


def _run(home: Path, args: list[str], served: bool) -> subprocess.CompletedProcess:
    env = _env(home, **({} if served else {"FLOWLAKE_QUERY_SERVER": "false"}))
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=120)


def _state(home: Path) -> dict:
    return json.loads((home / "state" / "query-server.json").read_text())


def _answered(home: Path, at_least: int) -> int:
    """The server's count of questions taken, once it reached at_least (it writes the count
    right after forking the answer, which a loaded box may run first)."""
    deadline = time.monotonic() + 10
    while (n := _state(home)["answered"]) < at_least and time.monotonic() < deadline:
        time.sleep(0.05)
    return n


def _loaded(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("args", QUESTIONS, ids=[" ".join(a[1:])[:40] for a in QUESTIONS])
def test_served_answer_is_the_commands_own(home, server, args):
    before = _state(home)["answered"]
    warm, cold = _run(home, args, served=True), _run(home, args, served=False)
    assert warm.returncode == cold.returncode == 0, (warm.stderr, cold.stderr)
    assert warm.stdout == cold.stdout and len(warm.stdout.splitlines()) >= 3
    # the server answered: the command loaded no engine; answering itself, it loads DuckDB
    assert _loaded(warm.stderr) == "LOADED []", warm.stderr
    assert _loaded(cold.stderr) == "LOADED ['_duckdb']", cold.stderr
    assert _answered(home, before + 1) >= before + 1


@pytest.mark.parametrize("args", [
    ["query", "--help"],
    ["query", "dst port foo"],
    ["query", "any", "--format", "xml"],
    ["query", "any", "--from", "2026-11-21", "--to", "2026-11-20"],
])
def test_help_and_errors_stay_the_commands(home, server, args):
    warm, cold = _run(home, args, served=True), _run(home, args, served=False)
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert warm.returncode == (0 if "--help" in args else 2)


def test_a_closed_pipe_ends_as_without_the_server(home, server):
    cmd = f"{FLOWLAKE} query any --format csv --limit 0 | head -3; echo status ${{PIPESTATUS[0]}}"
    out = {}
    for served in (True, False):
        env = _env(home, **({} if served else {"FLOWLAKE_QUERY_SERVER": "false"}))
        out[served] = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)
    assert out[True].stdout == out[False].stdout
    assert len(out[True].stdout.splitlines()) == 4 and out[True].stdout.splitlines()[-1] in ("status 0", "status 1")


def test_status_shows_the_server_and_a_stale_socket_falls_back(home, tmp_path):
    from flowlake.base import config
    from flowlake.jobs.query import status as query_status

    proc = _start(home)
    cfg = config.load(env=_env(home))
    st = query_status.status(cfg)["server"]
    assert st["enabled"] and st["socket"] == str(home / "run" / "query.sock")
    args = ["query", "proto tcp and dst port 443", "-s", "srcip/bytes"]
    want = _run(home, args, served=False).stdout
    assert _run(home, args, served=True).stdout == want
    assert _answered(home, 1) >= 1
    # killed hard: the socket file stays behind with nobody listening; commands answer themselves
    proc.kill()
    proc.wait(10)
    assert (home / "run" / "query.sock").exists()
    cold = _run(home, args, served=True)
    assert cold.returncode == 0 and cold.stdout == want
    assert _loaded(cold.stderr) == "LOADED ['_duckdb']"  # its own fast path answered (no click)
    # a restart takes the stale socket over
    proc = _start(home)
    warm = _run(home, args, served=True)
    assert warm.stdout == want
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    assert not (home / "run" / "query.sock").exists()
    assert not query_status.status(cfg)["server"]["running"]


def test_a_server_turned_off_in_the_config_leaves_commands_to_answer(home, tmp_path):
    """[query] server = false in the file while a server runs: it declines, the command answers."""
    toml = tmp_path / "flowlake.toml"
    toml.write_text("[query]\nserver = false\n")
    proc = _start(home)
    try:
        args = ["query", "proto tcp and dst port 22", "-s", "srcip/bytes"]
        env = _env(home, FLOWLAKE_CONFIG=str(toml))
        got = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=120)
        assert got.returncode == 0 and got.stdout == _run(home, args, served=False).stdout
        assert _answered(home, 1) >= 1  # it was asked, and declined
        assert _loaded(got.stderr) == "LOADED ['_duckdb']"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_a_home_too_deep_for_a_socket_leaves_the_stack_running(tmp_path):
    """`flowlake up` must not fail on a long FLOWLAKE_HOME: no server, commands answer themselves."""
    from flowlake.base import config
    from flowlake.jobs.query import server as query_server

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    cfg = config.load(env={**_env(deep)})
    assert len(str(query_server.socket_path(cfg)).encode()) > query_server.MAX_SOCKET_PATH
    assert query_server.start(cfg) is None and not query_server.managed(cfg).running()


def test_a_second_server_takes_the_socket_over_and_the_first_ends(home):
    """A restart while the old server lingers: the new one binds the socket anew, the old one
    (reached by no command now) ends without unlinking the new one's socket or writing its
    state over the new one's (CI: the two shared one temporary state file, the old one died
    on it and its clean-up removed the new server's socket)."""
    first = _start(home)
    second = _start(home)
    try:
        assert first.wait(15) == 0, "the superseded server did not end"
        assert "taken over by another server" in first.stdout.read()
        assert _listening(home / "run" / "query.sock") and _state_pid(home) == second.pid
        args = ["query", "proto tcp and dst port 443", "-s", "srcip/bytes"]
        assert _run(home, args, served=True).stdout == _run(home, args, served=False).stdout
        assert _answered(home, 1) >= 1 and _state_pid(home) == second.pid
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
    assert not (home / "run" / "query.sock").exists()
    assert not list((home / "state").glob("*.tmp"))
