"""A private FLOWLAKE_HOME for a lab test, with the test's spec written into it."""
from __future__ import annotations

import os
from pathlib import Path

from flowlake.base.ports import private_env
from needs import require


def lab_home(tmp_path_factory, name: str, spec_text: str) -> tuple[dict[str, str], Path]:
    """(environment for `flowlake lab run`, path of the spec); needs root, network
    namespaces, tbf, a random drop and NFQUEUE (tests/needs.py: fails in CI, else skips)."""
    require("netns", "tbf", "random_drop", "nfqueue", why="network namespaces, tbf, drop and delay for the lab")
    home = tmp_path_factory.mktemp(name)
    spec = home / f"{name}.toml"
    spec.write_text(spec_text)
    return {**os.environ, **private_env(home), "TZ": "UTC"}, spec
