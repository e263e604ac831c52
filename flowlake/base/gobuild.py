"""The project's Go programs: where they live, and `go build` when a binary is missing
or older than its sources. `python -m flowlake.base.gobuild` (run by `make setup`) builds
them all; the code that runs a program builds it on first use too.

- collectors/shipper: nfcapd files -> Kafka (the ingest hot path);
- jobs/toptalkers: the top_talkers lists on one machine ([reports] engine = local);
- collectors/routing: the BMP collector and its routing tables ([routing] enabled).
"""
from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import click

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]


def go_binary() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        raise click.ClickException("Go is not installed (need /usr/local/go/bin/go or `go` on PATH): run `make setup`")
    return go


class GoProgram:
    def __init__(self, source: Path, name: str):
        self.source = source
        self.binary = source / "bin" / name

    def sources(self) -> list[Path]:
        return [p for p in self.source.glob("*") if p.suffix == ".go" or p.name in ("go.mod", "go.sum")]

    def needs_build(self) -> bool:
        if not self.binary.exists():
            return True
        built = self.binary.stat().st_mtime
        return any(p.stat().st_mtime > built for p in self.sources())

    def build(self, force: bool = False) -> Path:
        """`go build` when the binary is missing or older than its sources; the binary."""
        if not force and not self.needs_build():
            return self.binary
        try:
            go = go_binary()
        except click.ClickException:
            if force or not self.binary.exists():
                raise
            # An image that ships the binary without Go (pipelines/Dockerfile): use it.
            log.warning("%s looks older than its sources, and Go is not installed to rebuild it: using it as is",
                        self.binary)
            return self.binary
        self.binary.parent.mkdir(parents=True, exist_ok=True)
        res = subprocess.run([go, "build", "-trimpath", "-o", str(self.binary), "."],
                             cwd=self.source, capture_output=True, text=True)
        if res.returncode != 0:
            raise click.ClickException(f"building {self.source} failed:\n{res.stdout}{res.stderr}")
        return self.binary


SHIPPER = GoProgram(ROOT / "collectors" / "shipper", "flowlake-shipper")
TOPTALKERS = GoProgram(ROOT / "jobs" / "toptalkers", "flowlake-toptalkers")
ROUTING = GoProgram(ROOT / "collectors" / "routing", "flowlake-routing")
PROGRAMS = (SHIPPER, TOPTALKERS, ROUTING)

if __name__ == "__main__":
    for program in PROGRAMS:
        try:
            program.build()
        except click.ClickException as exc:
            sys.exit(exc.message)
