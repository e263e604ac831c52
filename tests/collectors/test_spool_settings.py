"""[collector] spool_compression: its default, its environment override, a bad value's error,
and the spool line of `flowlake status` (unit: no nfcapd runs here)."""
from __future__ import annotations

import os

import pytest

from flowlake.base import config
from flowlake.base.config import ConfigError
from flowlake.collectors import nfcapd
from flowlake.collectors.status import spool_line

# argv() needs the nfcapd binary: `make setup` installs it; without it the tests fail naming it
# (nfcapd.argv: "nfcapd is not installed"), never skip.


def load(tmp_path, **env):
    return config.load(env={**os.environ, "FLOWLAKE_HOME": str(tmp_path), **env})


def test_lz4_is_the_default_and_the_environment_overrides_it(tmp_path):
    argv = nfcapd.argv(load(tmp_path))
    assert argv[argv.index("-I") + 2:] == ["-y"]
    for value, flags in (("none", []), ("bz2", ["-j"]), ("lz4", ["-y"])):
        argv = nfcapd.argv(load(tmp_path, FLOWLAKE_COLLECTOR_SPOOL_COMPRESSION=value))
        assert argv[argv.index("-I") + 2:] == flags, value


def test_a_value_nfcapd_cannot_write_is_an_error_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"\[collector\] spool_compression = 'zstd': expected one of 'none', 'lz4'"):
        nfcapd.argv(load(tmp_path, FLOWLAKE_COLLECTOR_SPOOL_COMPRESSION="zstd"))


def test_status_line_of_an_empty_and_a_damaged_spool(tmp_path):
    cfg = load(tmp_path)
    st = nfcapd.spool_stats(cfg)
    assert st["bytes_per_flow"] is None and st["files_read"] == 0
    assert "bytes/flow unknown" in spool_line(st) and "no closed files" in spool_line(st)
    spool = nfcapd.spool_dir(cfg)
    spool.mkdir(parents=True)
    (spool / "nfcapd.202601010000").write_bytes(b"not an nfdump file" * 20)
    st = nfcapd.spool_stats(cfg)
    assert st["files_unreadable"] == 1 and st["file_compression"] == {"unknown": 1} and st["bytes_per_flow"] is None
