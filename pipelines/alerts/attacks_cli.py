"""`flowlake attacks list|show`: the volumetric attacks the DDoS detector recorded (issue 36)."""
from __future__ import annotations

import json

import click

from flowlake.base import config as _config


def _rows(cfg) -> list[dict]:
    """Every stored attack with its mitigation status, newest first. An attack still open
    in state/ddos/attacks.json is shown as that file has it (fresher than the lake's row,
    which is rewritten at most every [ddos] lake_update_seconds)."""
    from .attacks import AttackStore, mitigations, public, read_current  # noqa: PLC0415  (start-up: deltalake)

    rows = {r["id"]: public(r) for r in AttackStore.from_config(cfg).read()}
    for cur in read_current(cfg).get("attacks") or []:
        if isinstance(cur, dict) and cur.get("id") in rows:
            for k in ("peak_pps", "peak_bps", "updated", "ended"):
                if k in cur:
                    rows[cur["id"]][k] = cur[k]
            rows[cur["id"]]["state"] = "open" if cur.get("ended") is None else "ended"
    mit = mitigations(cfg)
    out = []
    for r in rows.values():
        r["mitigation"] = mit.get(r["id"], "none")
        out.append(r)
    return sorted(out, key=lambda r: (r["started"] or "", r["id"]), reverse=True)


@click.group()
def attacks() -> None:
    """Volumetric attacks (DDoS) on the operator's addresses.

    \b
    The DDoS detector of the alerts service ([ddos] in flowlake.toml) judges every rotated
    nfcapd interval as it reaches Kafka: packets/s, bits/s and new flows/s per destination
    and attack class against thresholds and the host's baseline. Attacks live in
    lake/attacks/ (Delta) and state/ddos/attacks.json; their alerts go out as detector "ddos".

    \b
    Examples:
      flowlake attacks list                    every stored attack, open ones first
      flowlake attacks list --open --json      open attacks as a JSON array
      flowlake attacks show 3fa2c1d09b7e
    """


@attacks.command("list")
@click.option("--open", "only_open", is_flag=True, help="Only attacks not ended.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of objects: id, victim, scope, attack_class, "
                                                      "protocol, peak_pps, peak_bps, peak_flows, started, updated, "
                                                      "ended, mitigation, and the evidence.")
def list_cmd(only_open: bool, as_json: bool) -> None:
    """List attacks, newest first."""
    cfg = _config.get()
    rows = _rows(cfg)
    if only_open:
        rows = [r for r in rows if r["ended"] is None]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    from .base import si  # noqa: PLC0415  (start-up)

    t = Table(title=f"attacks ({len(rows)}, {sum(r['ended'] is None for r in rows)} open)")
    for col in ("id", "victim", "class", "peak", "started", "ended", "sources", "mitigation"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(r["id"], r["victim"], r["attack_class"], f"{si(r['peak_pps'] or 0, 'pkt/s')}, "
                  f"{si(r['peak_bps'] or 0, 'bit/s')}", (r["started"] or "")[:19],
                  "[bold red]open[/]" if r["ended"] is None else r["ended"][:19],
                  ", ".join(r.get("top_sources") or [])[:60], r["mitigation"])
    Console().print(t)


@attacks.command("show")
@click.argument("attack_id")
@click.option("--json", "as_json", is_flag=True, help="The attack as one JSON object.")
def show_cmd(attack_id: str, as_json: bool) -> None:
    """One attack with its evidence (ATTACK_ID: its id or 4+ leading digits)."""
    cfg = _config.get()
    hits = [r for r in _rows(cfg) if r["id"] == attack_id or (len(attack_id) >= 4 and r["id"].startswith(attack_id))]
    if not hits:
        raise click.ClickException(f"no attack {attack_id!r} in {cfg.lake / 'attacks'} "
                                   "(`flowlake attacks list` shows the ids)")
    r = hits[0]
    if as_json:
        click.echo(json.dumps(r, indent=1))
        return
    width = max(len(k) for k in r)
    for k, v in r.items():
        click.echo(f"{k:<{width}}  {', '.join(map(str, v)) if isinstance(v, list) else v}")
