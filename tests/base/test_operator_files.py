"""Operators' CSV files (flowlake/base/operator_files.py) through both of its callers: the
enrichment's networks file and the port map read the same way (a spreadsheet's BOM,
comments and blank lines before the header) and name the file and line of a problem."""
from __future__ import annotations

import re

import pytest

from flowlake.base.operator_files import OperatorFileError
from flowlake.pipelines import port_map
from flowlake.pipelines.enrich import networks


def test_bom_comments_and_line_numbers_in_both_files(tmp_path):
    nets = tmp_path / "nets.csv"
    nets.write_bytes("\ufeff# site prefixes\n\nprefix,name\n10.0.0.0/8,a\n\n10.0.0.0/8,b\n".encode())
    with pytest.raises(networks.NetworksError, match=r"nets.csv:6: prefix 10.0.0.0/8 already on line 4"):
        networks.parse(nets)
    ports = tmp_path / "ports.csv"
    ports.write_bytes("\ufeffport,proto,service\n# ours\n9999,udp,telemetry\n".encode())
    assert port_map.parse(ports) == {(17, 9999): "telemetry"}  # the BOM'd header is still the header


@pytest.mark.parametrize("parse", [networks.parse, port_map.parse])
def test_unreadable_and_undecodable_files_name_file_and_line(tmp_path, parse):
    bad = tmp_path / "bad.csv"
    data = b"prefix,name\n10.0.0.0/8,ok\n10.1.0.0/16,caf\xe9\n"  # Latin-1, not UTF-8
    bad.write_bytes(data)
    at = data.index(b"\xe9")
    with pytest.raises(OperatorFileError, match=rf"{re.escape(str(bad))}:3: not UTF-8 text \(.* at byte {at}\)"):
        parse(bad)
    with pytest.raises(OperatorFileError, match=rf"{re.escape(str(tmp_path))}/missing.csv: cannot read the .*: No such"):
        parse(tmp_path / "missing.csv")
