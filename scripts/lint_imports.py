#!/usr/bin/env python3
"""Run import-linter's contracts (.importlinter) over the flowlake package.

The package maps folders (flowlake.collectors = collectors/, ...; setup.py), which
import-linter's graph builder cannot follow: it walks one folder per package. So the
package is laid out once as a tree of symlinks in a temporary folder and the linter runs
there. `make check` and `make test` call this; exit status is lint-imports' own.

    scripts/lint_imports.py [--root DIR] [lint-imports options...]
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

STAGES = ("collectors", "pipelines", "jobs", "schemas")


def symlink_tree(root: Path, dest: Path) -> Path:
    pkg = dest / "flowlake"
    pkg.mkdir(parents=True)
    for entry in (root / "flowlake").iterdir():
        if entry.name != "__pycache__" and entry.name not in STAGES:
            (pkg / entry.name).symlink_to(entry)
    for stage in STAGES:
        (pkg / stage).symlink_to(root / stage)
    return pkg


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    if argv[:1] == ["--root"]:
        root, argv = Path(argv[1]).resolve(), argv[2:]
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        print("lint-imports not found: `make setup` installs import-linter into .venv", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="flowlake-lint-imports-") as tmp:
        symlink_tree(root, Path(tmp))
        env = {**os.environ, "PYTHONPATH": tmp}
        # --no-cache: a cache keyed on the temporary folder's paths would only grow
        return subprocess.run([exe, "--config", str(root / ".importlinter"), "--no-cache", *argv],
                              cwd=tmp, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
