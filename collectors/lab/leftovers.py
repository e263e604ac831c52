"""What a killed lab left behind: found, shown in `flowlake status`, and removed.

A lab stopped by SIGINT/SIGTERM undoes its own namespaces (netns.Namespaces.close); one
killed with SIGKILL cannot. Its owner record (state/lab/owners/<pid>.json, rewritten by
Namespaces before each namespace, veth or process is made) says what it made. A record
whose process is gone (no such pid, a zombie, or the pid reused by a process that started
at another time) is a dead lab's, and `clean` removes what it lists: the processes still in
its namespaces (endpoint and iperf3 servers, clients, softflowd, the NetFlow relay), the
namespaces themselves (their veths, tbf qdiscs, nftables/iptables drop and NFQUEUE rules
live inside them and go with them), veths a kill left in the host's namespace, and the
export's run window left open in the registry. A live lab's record is never touched.

Namespaces named fl-lab-<pid>-* that no record of this home lists (a lab of another
FLOWLAKE_HOME, or of a version before records) are reported as unrecorded, and removed only
on request (`flowlake lab clean --unrecorded`), and only when no process with that pid exists.
"""
from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import click

from flowlake.base import config

from .netns import sh
from .procs import _stat, alive, process_start  # noqa: F401  (re-exported)

UNRECORDED = re.compile(r"^fl-lab-(\d+)-")


def owners_dir(cfg) -> Path:
    return cfg.path("state", "lab", "owners")






def namespaces() -> list[str]:
    out = sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _pids_in(ns: str) -> list[int]:
    return [int(p) for p in sh("ip", "netns", "pids", ns, check=False).stdout.split() if p.isdigit()]


def _stop(pids: list[int], grace_s: float = 3.0) -> int:
    """SIGTERM, then SIGKILL what is still there after `grace_s`; returns how many were running."""
    running = [p for p in pids if alive(p)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in running:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + grace_s
        while any(alive(p) for p in running) and time.time() < deadline:
            time.sleep(0.1)
        if not any(alive(p) for p in running):
            break
    return len(running)


def _records(cfg) -> list[dict]:
    out = []
    for path in sorted(owners_dir(cfg).glob("*.json")):
        try:
            rec = json.loads(path.read_text())
            rec["pid"] = int(rec["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a record is replaced atomically: an unreadable one is not ours
        rec["record"] = str(path)
        out.append(rec)
    return out


def find(cfg) -> dict:
    """{"dead": owner records of dead labs (with the namespaces of theirs that still exist),
    "unrecorded": fl-lab-<pid>-* namespaces of no record here whose pid is gone}."""
    present = namespaces()
    records = _records(cfg)
    dead = []
    for rec in records:
        if alive(rec["pid"], rec.get("started")):
            continue
        rec["present"] = [ns for ns in rec.get("namespaces", []) if ns in present]
        dead.append(rec)
    listed = {ns for rec in records for ns in rec.get("namespaces", [])}
    unrecorded = [ns for ns in present if ns not in listed and (m := UNRECORDED.match(ns))
                  and not alive(int(m[1]))]
    return {"dead": dead, "unrecorded": unrecorded}


def _host_link(dev: str) -> bool:
    return sh("ip", "link", "show", "dev", dev, check=False).returncode == 0


def remove(cfg, rec: dict) -> list[str]:
    """Undo what a dead lab's record lists; returns what was removed, for humans."""
    done = []
    for ns in rec.get("present", rec.get("namespaces", [])):
        n = _stop(_pids_in(ns))
        sh("ip", "netns", "del", ns, check=False)
        done.append(f"namespace {ns}" + (f" ({n} processes in it stopped)" if n else ""))
    strays = [pid for pid, started in rec.get("procs", []) if started and alive(pid, started)]
    if strays:  # one that never entered a namespace (a kill in between)
        done.append(f"{_stop(strays)} processes outside its namespaces stopped")
    for dev in rec.get("veths", []):
        if _host_link(dev):
            sh("ip", "link", "del", dev, check=False)
            done.append(f"veth {dev}")
    window = rec.get("open_window")
    if window:
        from .export import register  # noqa: PLC0415  (start-up: flowlake status)

        register(cfg, window, int(time.time() * 1000))
        done.append(f"run window of {window['run_id']} closed")
    Path(rec["record"]).unlink(missing_ok=True)
    return done


def remove_unrecorded(ns: str) -> str:
    n = _stop(_pids_in(ns))
    sh("ip", "netns", "del", ns, check=False)
    return f"namespace {ns}" + (f" ({n} processes in it stopped)" if n else "")


def clean(cfg, echo, unrecorded: bool = False) -> dict:
    """Remove what dead labs of this home left (and unrecorded fl-lab namespaces on request)."""
    found = find(cfg)
    removed: list[str] = []
    for rec in found["dead"]:
        what = remove(cfg, rec)
        removed += what
        echo(f"lab: removed what a killed lab (pid {rec['pid']}) left: " + ("; ".join(what) or "nothing was left"))
    if unrecorded:
        for ns in found["unrecorded"]:
            removed.append(remove_unrecorded(ns))
            echo(f"lab: removed unrecorded {removed[-1]}")
    elif found["unrecorded"]:
        echo(f"lab: {len(found['unrecorded'])} fl-lab namespaces of dead labs not recorded in this home "
             f"({', '.join(found['unrecorded'])}): `flowlake lab clean --unrecorded` removes them")
    return {"labs": len(found["dead"]), "removed": removed,
            "unrecorded": [] if unrecorded else found["unrecorded"]}


def status(cfg) -> dict:
    """Leftovers for `flowlake status`: the dead labs' namespaces still present."""
    found = find(cfg)
    left = [ns for rec in found["dead"] for ns in rec["present"]]
    return {"leftover_labs": len(found["dead"]), "leftover_namespaces": left,
            "unrecorded_namespaces": found["unrecorded"]}


@click.command("clean")
@click.option("--unrecorded", is_flag=True,
              help="Also remove fl-lab-<pid>-* namespaces no record of this home lists whose pid is gone "
                   "(labs of another FLOWLAKE_HOME or of an older version).")
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON.")
def clean_cmd(unrecorded, as_json):
    """Remove what killed labs left: namespaces, the processes in them, stray veths.

    A lab stopped with Ctrl-C or SIGTERM cleans up after itself; one killed with
    SIGKILL (or by a crash) leaves its namespaces, servers, softflowd and relay
    running. Each lab keeps an owner record ($FLOWLAKE_HOME/state/lab/owners/<pid>.json);
    this removes what the records of dead labs list, and never touches a live lab.
    `flowlake lab run` does the same before it starts; `flowlake status` shows what
    is left. Needs root.

    \b
    Examples:
      flowlake lab clean
      flowlake lab clean --unrecorded --json
    """
    if os.geteuid() != 0:
        raise click.ClickException("removing namespaces needs root")
    out = clean(config.get(), lambda m: click.echo(m, err=True), unrecorded=unrecorded)
    if as_json:
        click.echo(json.dumps(out))
    else:
        click.echo(f"removed {len(out['removed'])} things left by {out['labs']} killed labs"
                   if out["labs"] or out["removed"] else "nothing left by killed labs")
