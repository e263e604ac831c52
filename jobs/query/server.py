"""The warm query server: `flowlake query` answered by a process that has already started.

Why: a whole `flowlake query` command spends ~0.15 CPU-s before it reads a flow (the
interpreter, DuckDB's library, the parser, the config), as much as its scan of a day
with both cores (bench/query.py); nfdump starts in milliseconds. The stack (`flowlake
up`, [query] server = true) keeps one process with all of that loaded; a command finds
its socket ($FLOWLAKE_HOME/run/query.sock) and hands over its question and its own
stdin, stdout and stderr (SCM_RIGHTS, as Mercurial's chg does). The server forks a child
per question that takes those descriptors, the caller's environment and working folder,
and runs the same fast path (fast.answer_argv) a command would run itself: the bytes
printed, the progress on a terminal, `| head` and the exit status are the command's own.
A question the fast path declines (help, errors, the Spark engine, anonymisation) is
declined here too and the command answers it itself, so every message stays click's.

Bounds: [query] server_max_clients questions at once (beyond: the command answers
itself); a child exits after its answer. Only the server's own user may connect (the
socket is 0600 and the peer's uid is checked). A command falls back to answering
itself whenever the server is absent, stale or busy: the server only ever saves time.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import time

SOCKET_NAME = "query.sock"
MAX_REQUEST = 1 << 20  # bytes of a question (argv, environment, folder)
MAX_SOCKET_PATH = 100  # bytes: sun_path holds 108 with its NUL
FIRST_REPLY_SECONDS = 10.0  # the server forks within milliseconds; longer and the command answers itself


def socket_path(cfg):
    return cfg.path("run", SOCKET_NAME)


def state_path(cfg):
    return cfg.path("state", "query-server.json")


# ---- the command's side --------------------------------------------------------------
OFF = ("false", "0", "no", "off")


def _client_socket_path() -> str | None:
    """Where this command's server listens, or None. An absolute FLOWLAKE_HOME names it
    without reading the config (its parse is a fifth of a served answer's cost); [query]
    server and fast_start, when off in the file, are honoured by the server's answer,
    which then declines."""
    if os.environ.get("FLOWLAKE_QUERY_SERVER", "").strip().lower() in OFF:
        return None
    home = os.environ.get("FLOWLAKE_HOME", "")
    if home.startswith("/"):
        return os.path.join(home, "run", SOCKET_NAME)
    try:
        from flowlake.base import config

        cfg = config.get()
        if not bool(cfg.query.server) or not bool(cfg.query.fast_start):
            return None
        return str(socket_path(cfg))
    except Exception:  # noqa: BLE001 - a config error is reported by the command itself
        return None


def try_server(argv: list[str]) -> None:
    """Ask the warm server to answer `flowlake query ARGV` with this process's stdin,
    stdout and stderr; end this process with its status when it answered. Returns (and
    the command answers itself) when there is no server, it is busy or it declined."""
    path = _client_socket_path()
    if path is None or not os.path.exists(path):
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(FIRST_REPLY_SECONDS)  # a stopped or wedged server: answer here instead
        sock.connect(path)
        body = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
        socket.send_fds(sock, [struct.pack("!I", len(body)) + body], [0, 1, 2])
        reader = sock.makefile("rb")
        first = json.loads(reader.readline() or b"{}")
        sock.settimeout(None)
    except (OSError, ValueError):  # no server behind the socket (a stale file), gone, or too slow:
        sock.close()  # an answer that starts later finds the socket closed and stops before printing
        return
    if "pid" not in first:  # declined (busy, or a question for click)
        sock.close()
        return
    child = int(first["pid"])

    def forward(signum, _frame):  # Ctrl-C reaches this process only: pass it to the answer
        try:
            os.kill(child, signum)
        except OSError:
            pass

    before = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    line = reader.readline()  # a forwarded signal does not interrupt it (PEP 475)
    try:
        last = json.loads(line) if line else {}
    except ValueError:
        last = {}
    if "declined" in last:  # the fast path declined it before printing anything
        sock.close()
        for sig, handler in before.items():
            signal.signal(sig, handler)
        return
    # the answer's process ended without a status (killed): say so, as a command would die
    status = int(last.get("status", 1))
    if "status" not in last:
        try:
            os.write(2, b"Error: the query server's answer ended early (see its log)\n")
        except OSError:
            pass
    os._exit(status)


# ---- the server's side ---------------------------------------------------------------
def _warm() -> None:
    """Import what an answer needs, without starting a thread (the server forks)."""
    from flowlake.pipelines import lake_read, lake_snapshot  # noqa: F401

    from . import answer, engines, fast, index, lake, output, parser, spec, sql  # noqa: F401
    from .duck import duckdb_module

    duckdb_module()
    parser.parse("proto tcp and dst port 443")  # builds the parser's tables once


def _read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
    if len(data) < 4:
        raise ValueError("short request")
    (size,) = struct.unpack("!I", data[:4])
    if size > MAX_REQUEST:
        raise ValueError(f"request of {size} bytes")
    body = data[4:]
    while len(body) < size:
        more = conn.recv(size - len(body))
        if not more:
            raise ValueError("request cut short")
        body += more
    return json.loads(body), fds


def _answer_in_child(conn: socket.socket, req: dict, fds: list[int]) -> None:
    """In the forked child: become the command (descriptors, environment, folder), answer."""
    status = 1
    try:
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.environ.clear()
        os.environ.update(req.get("env") or {})
        os.chdir(req.get("cwd") or "/")
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sys.stdout.reconfigure(line_buffering=os.isatty(1))
        sys.argv = ["flowlake", "query", *req.get("argv", [])]
        from flowlake.base import config

        config.reset()
        conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        from .fast import answer_argv

        cfg = config.get()
        got = answer_argv(list(req.get("argv", []))) if bool(cfg.query.server) else None
        conn.sendall(json.dumps({"declined": True} if got is None else {"status": got}).encode() + b"\n")
        status = 0
    except BaseException:  # noqa: BLE001 - the command reports the early end
        pass
    finally:
        os._exit(status)


class Server:
    def __init__(self, cfg, max_clients: int | None = None):
        self.cfg = cfg
        self.path = socket_path(cfg)
        self.max_clients = max(1, int(max_clients or cfg.query.server_max_clients))
        self.children: set[int] = set()
        self.counts = {"answered": 0, "busy": 0, "bad_requests": 0}
        self.started = time.time()
        self.sock: socket.socket | None = None
        self.inode: int | None = None  # of the socket file this server bound

    def listen(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if len(str(self.path).encode()) > MAX_SOCKET_PATH:
            raise SystemExit(f"query server: socket path {self.path} is longer than a Unix socket allows "
                             "(move FLOWLAKE_HOME to a shorter path)")
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # 0600: only this user's commands
        try:
            sock.bind(str(self.path))
        finally:
            os.umask(old)
        sock.listen(64)
        sock.settimeout(1.0)
        self.sock = sock
        self.inode = os.stat(self.path).st_ino

    def owns_socket(self) -> bool:
        """Whether the socket file is still the one this server bound. A second server
        (a restart while this one lingers) unlinks and binds it anew: from then on no
        command reaches this one, and its state file and its socket's removal are the
        new server's business, not this one's."""
        try:
            return os.stat(self.path).st_ino == self.inode
        except OSError:
            return False

    def _reap(self) -> None:
        for pid in list(self.children):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.children.discard(pid)

    def write_state(self) -> None:
        path = state_path(self.cfg)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # two servers at once must not share one
        tmp.write_text(json.dumps({"pid": os.getpid(), "started": self.started, "socket": str(self.path),
                                   "max_clients": self.max_clients, "busy_now": len(self.children),
                                   **self.counts, "updated": time.time()}))
        os.replace(tmp, path)

    def handle(self, conn: socket.socket) -> None:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid != os.getuid():
            self.counts["bad_requests"] += 1
            return
        conn.settimeout(5.0)
        try:
            req, fds = _read_request(conn)
        except (OSError, ValueError):
            self.counts["bad_requests"] += 1
            return
        try:
            self._reap()
            if len(self.children) >= self.max_clients:
                self.counts["busy"] += 1
                conn.sendall(b'{"declined": "busy"}\n')
                return
            conn.settimeout(None)
            pid = os.fork()
            if pid == 0:
                if self.sock is not None:
                    self.sock.close()
                _answer_in_child(conn, req, fds)
            self.children.add(pid)
            self.counts["answered"] += 1
        finally:
            for fd in fds:
                os.close(fd)

    def serve(self, stop=lambda: False) -> None:
        self.listen()
        # answers are reaped as they end: a bounded count of live children, and their CPU
        # in this process's accounts at once (bench/query.py reads it)
        signal.signal(signal.SIGCHLD, lambda *_: self._reap())
        self.write_state()
        try:
            while not stop():
                try:
                    conn, _ = self.sock.accept()
                except socket.timeout:
                    self._reap()
                    if not self.owns_socket():
                        print(f"query server: {self.path} was taken over by another server; ending",
                              flush=True)
                        break
                    continue
                try:
                    self.handle(conn)
                except OSError:
                    self.counts["bad_requests"] += 1
                finally:
                    conn.close()
                if self.owns_socket():
                    self.write_state()
        finally:
            self.sock.close()
            if self.owns_socket():  # a superseded server leaves the new one's socket and state alone
                self.path.unlink()
                self.write_state()


def serve(cfg) -> None:
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    _warm()
    server = Server(cfg)
    print(f"query server: answering on {server.path} (at most {server.max_clients} at once)", flush=True)
    server.serve(stop=lambda: bool(stopping))


# ---- the stack's side ----------------------------------------------------------------
def managed(cfg):
    from flowlake.base.process import Managed

    return Managed("query-server", cfg.path("run"), cfg.path("log"))


def start(cfg) -> int | None:
    """Started by `flowlake up` unless [query] server = false; ready once its socket exists."""
    from flowlake.base.process import wait_until

    if not bool(cfg.query.server):
        return None
    proc = managed(cfg)
    if proc.running():
        return proc.pid()
    path = socket_path(cfg)
    if len(str(path).encode()) > MAX_SOCKET_PATH:  # the stack runs on; commands answer themselves
        import logging

        logging.getLogger("flowlake.stack").warning(
            "query server not started: its socket path %s is longer than a Unix socket allows "
            "(%d bytes); move FLOWLAKE_HOME to a shorter path", path, MAX_SOCKET_PATH)
        return None
    pid = proc.start([sys.executable, "-m", "flowlake.cli", "query-server"])
    wait_until(path.exists, 60, "the query server to start", interval=0.2, proc=proc)
    return pid


def stop(cfg) -> bool:
    return managed(cfg).stop(timeout=10)


def status(cfg) -> dict:
    """For `flowlake status`: whether queries are answered warm, and how often."""
    proc = managed(cfg)
    out = {"enabled": bool(cfg.query.server), "running": proc.running(), "socket": str(socket_path(cfg))}
    try:
        doc = json.loads(state_path(cfg).read_text())
    except (OSError, ValueError):
        doc = {}
    if out["running"]:
        out.update({k: doc.get(k) for k in ("answered", "busy", "bad_requests", "max_clients", "started")})
    return out

