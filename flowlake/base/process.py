"""Start a background process with a pid file and a log; check and stop it."""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

log = logging.getLogger(__name__)


@dataclass
class Managed:
    name: str
    run_dir: Path
    log_dir: Path

    @property
    def pidfile(self) -> Path:
        return self.run_dir / f"{self.name}.pid"

    @property
    def logfile(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    def pid(self) -> int | None:
        """The pid if the process in the pid file is alive (and is the one we started)."""
        try:
            info = json.loads(self.pidfile.read_text())
        except (OSError, ValueError):
            return None
        pid = info.get("pid")
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            if abs(proc.create_time() - info.get("started", 0)) > 2:
                return None  # pid reused by something else
        except (psutil.Error, TypeError):
            return None
        return pid

    def running(self) -> bool:
        return self.pid() is not None

    def start(self, argv: list[str], env: dict | None = None, cwd: str | None = None) -> int:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        logfh = open(self.logfile, "ab")
        logfh.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
        logfh.flush()
        proc = subprocess.Popen(
            argv, stdout=logfh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True,
        )
        started = psutil.Process(proc.pid).create_time()
        self.pidfile.write_text(json.dumps({"pid": proc.pid, "started": started, "argv": argv}))
        log.info("%s started, pid %d, log %s", self.name, proc.pid, self.logfile)
        return proc.pid

    def stop(self, timeout: float = 30.0, sig: int = signal.SIGTERM) -> bool:
        pid = self.pid()
        if pid is None:
            self.pidfile.unlink(missing_ok=True)
            return False
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
        try:
            psutil.Process(pid).wait(timeout)
        except psutil.TimeoutExpired:
            log.warning("%s (pid %d) did not stop in %.0fs; killing", self.name, pid, timeout)
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                psutil.Process(pid).wait(10)
            except psutil.Error:
                pass
        except psutil.NoSuchProcess:
            pass
        self.pidfile.unlink(missing_ok=True)
        return True

    def kill(self) -> None:
        """SIGKILL the whole process group: what a crash looks like (fault tests)."""
        pid = self.pid()
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                psutil.Process(pid).wait(10)
            except psutil.Error:
                pass


def stop_child(proc: subprocess.Popen | None, grace: float = 10) -> None:
    """Stop a child this process started (test servers): SIGTERM, then SIGKILL after `grace` s."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def udp_bound(port: int) -> bool:
    for conn in psutil.net_connections(kind="udp"):
        if conn.laddr and conn.laddr.port == port:
            return True
    return False


def wait_until(check, timeout: float, what: str, interval: float = 0.25, proc: Managed | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc is not None and not proc.running():
            tail = ""
            try:
                tail = "\n".join(proc.logfile.read_text(errors="replace").splitlines()[-20:])
            except OSError:
                pass
            raise RuntimeError(f"{proc.name} exited while waiting for {what}; log {proc.logfile}:\n{tail}")
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def python_argv(*args: str) -> list[str]:
    """A `flowlake` subcommand as a service's command line (this interpreter, no console
    script lookup). The hub's CLI is named by module, not imported."""
    return [sys.executable, "-m", "flowlake.cli", *args]
