"""The unit tier's guard: what a unit test may not start, and how an attempt is caught.

Tiers (markers, set on test modules or functions, never derived from a test's folder):
  unit         given automatically to every test without one of the markers below:
               pure code, files, in-process tools; no services, no root
  integration  real services or daemons (Kafka, Spark, nfcapd, snmpd, dnsmasq, SMTP,
               Jupyter kernels, Go builds, a `flowlake up` stack)
  e2e          a whole stack end to end (also counts as integration)
  browser      Superset driven in headless Chromium (also counts as integration)
  root         needs root: network namespaces, tc, tmpfs mounts (also counts as integration)
  slow         takes more than ~30 s alone (orthogonal; `make check` leaves these out)

The guard watches unit tests only (in every run, `make check` or `make test`):
  - requesting a service fixture of tests/conftest.py (`kafka`, `spark`) fails at set-up;
  - starting a process that is a service (java, spark-submit, nfcapd, snmpd, superset,
    chromium, `ip netns`, go ...) fails: `subprocess.Popen` is wrapped, in the test process
    (calls from the main thread) and, through `sitecustomize.py` in this folder put on the
    children's PYTHONPATH, in every Python child (`flowlake ...` run as a command), whose
    attempts are written to a log the test process reads after each phase;
  - starting aiosmtpd's SMTP controller in-process fails.
The failure says what was started: "unit tier test started Spark: mark it integration".
FLOWLAKE_TIER_GUARD=0 in the environment switches the guard off (to bisect a problem).

This file is imported twice: by tests/conftest.py (as `_tier_guard.flowlake_tier_guard`)
and by `sitecustomize.py` in Python children (as `flowlake_tier_guard`); it uses only the
standard library so that it can load in any interpreter, the Superset virtualenv's included.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
ENV_ACTIVE = "FLOWLAKE_TIER_GUARD_ACTIVE"  # set only in the children of a guarded unit test
ENV_LOG = "FLOWLAKE_TIER_GUARD_LOG"        # where those children report an attempt
ENV_SWITCH = "FLOWLAKE_TIER_GUARD"         # "0" switches the guard off

# Marker names that take a test out of the unit tier.
SERVICE_MARKERS = ("integration", "e2e", "browser", "root")
# Session fixtures of tests/conftest.py that start a service, and what they start.
SERVICE_FIXTURES = {"kafka": "the Kafka broker", "spark": "Spark"}

_SPARK = {"spark-submit", "spark-class", "pyspark", "spark-shell", "beeline", "spark-daemon.sh",
          "start-master.sh", "start-worker.sh", "start-history-server.sh"}
_COLLECTORS = {"nfcapd": "nfcapd", "sfcapd": "sfcapd", "nfpcapd": "nfpcapd",
               "softflowd": "softflowd (an exporter)", "nfreplay": "nfreplay (an exporter)",
               "fprobe": "fprobe (an exporter)", "pmacctd": "pmacctd", "pmbmpd": "pmbmpd"}
_DAEMONS = {"snmpd": "snmpd", "dnsmasq": "dnsmasq", "gobgpd": "gobgpd", "gobgp": "gobgp",
            "exabgp": "exabgp", "iperf3": "iperf3", "kcat": "kcat", "kafkacat": "kcat",
            "superset": "Superset", "gunicorn": "Superset (gunicorn)",
            "chromium": "Chromium", "chromium-browser": "Chromium", "chromedriver": "Chromium",
            "google-chrome": "Chromium", "jupyter": "a Jupyter kernel",
            "go": "a Go build (go)"}
_ROOT = {"unshare", "nsenter", "tc", "nft", "iptables", "ip6tables", "mount", "umount", "sudo",
         "modprobe", "brctl", "ovs-vsctl"}
_GO_BUILT = (REPO / "collectors" / "shipper", REPO / "jobs" / "toptalkers" / "bin",
             REPO / "collectors" / "routing" / "bin")


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") not in ("0", "off", "no", "false")


def classify(args) -> str | None:
    """What a command line starts, if it is something a unit test may not start."""
    if isinstance(args, (str, bytes, os.PathLike)):
        args = [args]
    argv = [os.fsdecode(a) for a in args]
    if len(argv) >= 3 and os.path.basename(argv[0]) in ("sh", "bash", "dash") and argv[1] == "-c":
        try:
            words = shlex.split(argv[2])
        except ValueError:
            words = argv[2].split()
        for w in words:  # any word of a shell line: `exec java ...`, `nfcapd ... &`
            what = classify([w, *words[words.index(w) + 1:]]) if w and "=" not in w else None
            if what:
                return what
        return None
    if not argv:
        return None
    prog = argv[0]
    name = os.path.basename(prog)
    rest = argv[1:]
    if name == "java":
        line = " ".join(rest)
        if "kafka.Kafka" in line or "kafka.tools" in line or "org.apache.kafka" in line:
            return "the Kafka broker (java)"
        if "spark" in line.lower():
            return "Spark (java)"
        return "a JVM (java: Spark or Kafka)"
    if name in _SPARK:
        return f"Spark ({name})"
    if name in _COLLECTORS:
        return _COLLECTORS[name]
    if name in _DAEMONS:
        return _DAEMONS[name]
    if name == "node" and "playwright" in prog:
        return "Playwright (Chromium)"
    if name in _ROOT:
        return f"a root-only tool ({name}: network namespaces, tc, mounts): mark it root"
    if name == "ip" and ("-n" in rest or "-netns" in rest or any(
            a in rest for a in ("add", "del", "delete", "set", "flush", "exec", "change", "replace", "attach"))):
        # `ip netns list` and `ip -j link show` only read (flowlake status runs them)
        return "network namespaces or links (ip netns add/exec, ip link add ...): mark it root"
    if name.startswith("python") and ("ipykernel_launcher" in rest or "ipykernel" in rest):
        return "a Jupyter kernel"
    try:
        resolved = Path(prog).resolve()
    except (OSError, ValueError):
        resolved = None
    if resolved is not None and any(resolved.is_relative_to(d) for d in _GO_BUILT):
        return f"a Go-built binary ({resolved.name})"
    return None


def message(what: str, where: str = "") -> str:
    mark = "mark it root" if "mark it root" in what else "mark it integration"
    what = what.replace(": mark it root", "")
    return (f"unit tier test started {what}{where}: {mark} "
            f"(or e2e/browser), see tests/_tier_guard/flowlake_tier_guard.py")


class Guard:
    """Wraps subprocess.Popen._execute_child; `active` is set around a unit test's phases."""

    def __init__(self, child_log: Path | None, in_child: bool = False, on_violation=None):
        self.child_log = child_log
        self.in_child = in_child
        self.active = in_child
        self.violations: list[str] = []
        self.on_violation = on_violation  # called with the message (the test process raises)
        self._orig = None

    def install(self) -> None:
        if self._orig is not None:
            return
        orig = subprocess.Popen._execute_child
        guard = self

        def _execute_child(popen, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, *rest):
            if guard.watching():
                what = classify([executable, *list(args)[1:]] if executable and not isinstance(args, (str, bytes))
                                else args)
                if what:
                    guard.violation(message(what))
                env = guard.child_env(env)
            return orig(popen, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, *rest)

        subprocess.Popen._execute_child = _execute_child
        self._orig = orig
        if self.in_child:
            return  # children: processes only (importing aiosmtpd would slow every child)
        try:  # an in-process SMTP server (aiosmtpd's controller thread)
            from aiosmtpd.controller import Controller  # noqa: PLC0415  only when installed, not in children
        except ImportError:
            pass
        else:
            orig_start = Controller.start

            def start(controller, *a, **kw):
                if guard.watching():
                    guard.violation(message("an SMTP server (aiosmtpd)"))
                return orig_start(controller, *a, **kw)

            Controller.start = start

    def watching(self) -> bool:
        # In the test process only the main thread: a thread left running by an earlier
        # integration test (a supervisor restarting a daemon) is not the unit test's doing.
        if not self.active:
            return False
        if self.in_child:
            return True
        threading = sys.modules["threading"]  # imported by pytest; never imported here for a child
        return threading.current_thread() is threading.main_thread()

    def child_env(self, env):
        if self.in_child or self.child_log is None:
            return env  # children of children inherit the variables already set
        env = dict(os.environ if env is None else env)
        if env.get(ENV_ACTIVE) == "0":
            return env  # a child that runs its own guarded pytest (tests/hub/test_tiers.py)
        env[ENV_ACTIVE] = "1"
        env[ENV_LOG] = str(self.child_log)
        env["FLOWLAKE_TIER_GUARD_PREFIX"] = sys.prefix  # only flowlake's interpreter installs it
        pp = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(HERE) + (os.pathsep + pp if pp else "")
        return env

    def violation(self, msg: str) -> None:
        self.violations.append(msg)
        if self.child_log is not None and self.in_child:
            try:
                with open(self.child_log, "a") as fh:
                    fh.write(f"{msg} [in child pid {os.getpid()}]\n")
            except OSError:
                pass
        if self.on_violation is not None:
            self.on_violation(msg)
        raise RuntimeError(msg)  # in a child: the command fails instead of starting the service

    def child_violations(self, since: int) -> tuple[list[str], int]:
        """Lines children reported after byte offset `since`, and the new offset."""
        if self.child_log is None or not self.child_log.exists():
            return [], since
        with open(self.child_log) as fh:
            fh.seek(since)
            text = fh.read()
            return [ln for ln in text.splitlines() if ln.strip()], fh.tell()
