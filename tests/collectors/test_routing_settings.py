"""The routing collector's settings, command line and status without the collector running
(unit tier: nothing is started here; tests/collectors/test_routing.py runs it)."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from flowlake import components
from flowlake.base import config
from flowlake.collectors.routing import service


def load(tmp_path, text: str = "", **env):
    path = tmp_path / "flowlake.toml"
    path.write_text(f'home = "{tmp_path / "home"}"\n' + text)
    return config.load(path, env={k.upper(): v for k, v in env.items()})


def test_off_by_default_and_registered(tmp_path):
    cfg = load(tmp_path)
    comp = components.get(cfg, "routing")
    assert isinstance(comp, service.Routing) and comp.enabled() is False
    s = comp.settings
    assert (s.enabled, s.bmp_bind, s.bmp_port) == (False, "127.0.0.1", 10179)
    st = service.status(cfg)
    assert st == {"enabled": False, "listen": "127.0.0.1:10179", "socket": str(service.socket_path(cfg))}
    assert comp.start() is None  # `flowlake up` starts nothing while it is off


def test_argv_carries_the_settings_and_the_exporter_map(tmp_path):
    cfg = load(tmp_path, '[routing]\nenabled = true\nbmp_bind = "::1"\nmax_routes_per_router = 7\n'
                         '[exporters."192.0.2.1"]\nbmp_router = "198.51.100.1"\n'
                         '[exporters."192.0.2.2"]\nsampling = 10\n',
               flowlake_routing_bmp_port="11179", flowlake_routing_hold_down_seconds="5")
    argv = service.argv(cfg)
    assert argv[argv.index("--listen") + 1] == "[::1]:11179"
    assert argv[argv.index("--max-routes") + 1] == "7" and argv[argv.index("--hold-down") + 1] == "5s"
    assert argv[argv.index("--router-for") + 1] == "192.0.2.1=198.51.100.1" and argv.count("--router-for") == 1
    assert argv[argv.index("--socket") + 1] == str(service.socket_path(cfg))


@pytest.mark.parametrize("text, message", [
    ('[exporters."192.0.2.1"]\nbmp_router = "router-1"\n', r'\[exporters."192.0.2.1"\] bmp_router = .router-1.'),
    ('[routing]\nbmp_bind = "localhost"\n', r"\[routing\] bmp_bind = 'localhost': expected an IP address"),
    ('[routing]\nbmp_port = 70000\n', r"\[routing\] bmp_port = 70000"),
    ('[routing]\nmax_routes_per_router = -1\n', r"\[routing\] max_routes_per_router = -1"),
])
def test_a_bad_setting_names_its_key(tmp_path, text, message):
    with pytest.raises(config.ConfigError, match=message):
        service.argv(load(tmp_path, text))


def test_an_env_override_of_the_wrong_type_fails(tmp_path):
    with pytest.raises(config.ConfigError, match="FLOWLAKE_ROUTING_BMP_PORT"):
        load(tmp_path, flowlake_routing_bmp_port="10x")


def test_a_long_home_gets_a_short_socket_path(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    cfg = load(tmp_path, '[routing]\nenabled = true\n', flowlake_home=str(deep))
    path = service.socket_path(cfg)
    assert len(str(path)) <= service.MAX_SOCKET_PATH and path != deep / "run" / "routing.sock"
    assert path == service.socket_path(load(tmp_path, flowlake_home=str(deep)))  # stable for one home


def test_enabled_but_not_running_says_so(tmp_path):
    cfg = load(tmp_path, "[routing]\nenabled = true\n")
    st = service.status(cfg)
    assert st["enabled"] is True and st["running"] is False and "error" not in st
    out = io.StringIO()
    service.print_status(Console(file=out, width=200), st)
    assert "not running" in out.getvalue() and "127.0.0.1:10179" in out.getvalue()
    with pytest.raises(service.RoutingUnavailable, match="flowlake up"):
        service.lookup(cfg, "192.0.2.1")
    with pytest.raises(ValueError, match="not an IP address"):
        service.lookup(cfg, "not-an-address")


def test_status_lines_of_a_running_collector():
    st = {"enabled": True, "running": True, "listen": "127.0.0.1:10179", "routes": 3, "paths": 9,
          "memory_bytes": 3 << 20, "sessions": {"up": 1, "total": 3}, "resets": {"truncated": 1},
          "routers": {"192.0.2.1": {"session": "up", "connected": "2026-11-28T06:00:00Z", "sys_name": "r1",
                                    "peers": 2, "peers_up": 2, "routes": {"ipv4": 2, "ipv6": 1}, "paths": 9,
                                    "lookup_view": "loc-rib", "last_update": "2026-11-28T06:01:00Z", "last_error": ""},
                      "192.0.2.9": {"session": "closed", "closed": "2026-11-28T06:02:00Z", "sys_name": "",
                                    "last_error": "truncated: the connection ended"}}}
    out = io.StringIO()
    service.print_status(Console(file=out, width=300), st)
    text = out.getvalue()
    assert "1 of 2 routers up, 3 prefixes, 9 paths, memory 3.0 MiB, resets truncated 1" in text
    assert "192.0.2.1 (r1): up since 2026-11-28T06:00:00Z, peers 2/2 up, 2 IPv4 + 1 IPv6 prefixes" in text
    assert "192.0.2.9: closed" in text and "last reset: truncated" in text
