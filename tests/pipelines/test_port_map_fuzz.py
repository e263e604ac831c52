"""Port maps are user input: generated and mutated files either parse, or fail with a
PortMapError that names the file and line; never another exception."""
from __future__ import annotations

from pathlib import Path

from hypothesis import example, given, settings, strategies as st

from flowlake.pipelines import port_map

DEFAULT = (Path(port_map.__file__).parent / "port_map.csv").read_text()
cell = st.one_of(st.integers(-5, 70000).map(str), st.sampled_from(["tcp", "udp", "any", "sctp", "6", "17", "x"]),
                 st.from_regex(r"[0-9]{1,5}-[0-9]{1,5}", fullmatch=True), st.text(max_size=12))
line = st.lists(cell, min_size=0, max_size=5).map(",".join)


def _check(tmp_path_factory, text: str):
    f = tmp_path_factory.mktemp("pm") / "ports.csv"
    f.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        table = port_map.parse(f)
    except port_map.PortMapError as exc:
        assert str(f) in str(exc)
        return
    for (proto, port), service in table.items():
        assert 0 <= port <= 65535 and 0 <= proto <= 255 and service


@settings(max_examples=300, deadline=None)
@given(st.lists(line, max_size=8).map("\n".join))
@example("0,\u00b2,0")  # found by this test: '²'.isdigit() is True, int('²') fails
def test_generated_port_maps(tmp_path_factory, text):
    _check(tmp_path_factory, text)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(DEFAULT) - 1), st.text(min_size=1, max_size=6))
def test_mutated_default_port_map(tmp_path_factory, pos, junk):
    _check(tmp_path_factory, DEFAULT[:pos] + junk + DEFAULT[pos + 1:])
