"""A private FLOWLAKE_HOME for a lab test, with the test's spec written into it."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from flowlake.base.ports import private_env


def lab_home(tmp_path_factory, name: str, spec_text: str) -> tuple[dict[str, str], Path]:
    """(environment for `flowlake lab run`, path of the spec); fails unless root."""
    if os.geteuid() != 0:
        pytest.fail("the lab needs root (network namespaces); CI runs as root")
    home = tmp_path_factory.mktemp(name)
    spec = home / f"{name}.toml"
    spec.write_text(spec_text)
    return {**os.environ, **private_env(home), "TZ": "UTC"}, spec
