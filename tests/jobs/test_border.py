"""Border breakdowns (issue 26): reverse DNS against a real DNS server (dnsmasq on a free
loopback port, with known PTR records and a zone that never answers), and the reports
remote_domains and flow_durations over a modelled day, checked against the model's own
truth computed independently with numpy."""
from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import socket
import sys
import time
from collections import defaultdict

import numpy as np
import pyarrow.parquet as pq
import pytest

from flowlake.jobs import rdns
from flowlake.collectors.traffic import api, lake_rows, model
from services import dnsmasq
from conftest import run
from test_jobs import private_cfg

DAY = dt.date(2026, 4, 7)


@pytest.fixture(scope="module")
def silent_port():
    """A UDP socket that receives queries and never answers: names forwarded to it time out."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    yield s.getsockname()[1]
    s.close()


PTR = {"203.0.113.1": "www.example.co.uk", "203.0.113.2": "mail.example.co.uk",
       "2a00:1450::5": "host.slac.stanford.edu", "198.18.0.9": "gw.lan"}


@pytest.fixture(scope="module")
def dns_server(tmp_path_factory, silent_port):
    srv = dnsmasq.start(tmp_path_factory.mktemp("dnsmasq"), PTR, {"198.51.66.0/24": ("127.0.0.1", silent_port)})
    yield srv
    srv.stop()


def settings(srv, **kw):
    return rdns.Settings(**{"server": "127.0.0.1", "port": srv.port, "timeout_seconds": 0.5,
                            "budget_seconds": 10.0, **kw})


def test_reverse_zone_names():
    assert dnsmasq.reverse_zone("198.51.66.0/24") == "66.51.198.in-addr.arpa"
    assert dnsmasq.reverse_zone("10.0.0.0/8") == "10.in-addr.arpa"
    assert dnsmasq.reverse_zone("2001:db8::/32") == "8.b.d.0.1.0.0.2.ip6.arpa"


def test_names_reduce_to_registered_domain_and_tld():
    assert rdns.split_name("www.example.co.uk") == ("example.co.uk", "uk")
    assert rdns.split_name("host.slac.stanford.edu.") == ("stanford.edu", "edu")
    assert rdns.split_name("a.b.c.cern.ch") == ("cern.ch", "ch")
    assert rdns.split_name("gw.lan") == (None, "lan")  # no public suffix: no registered domain
    assert rdns.split_name(None) == (None, None)


@pytest.mark.integration
def test_lookups_cache_and_timeouts_against_dnsmasq(dns_server, tmp_path):
    cache = tmp_path / "state" / rdns.CACHE_FILE
    addrs = ["203.0.113.1", "2a00:1450::5", "203.0.113.77", "198.51.66.7", "not-an-address", "198.18.0.9"]
    r = rdns.resolve(addrs, settings(dns_server), cache)
    assert r.names == {"203.0.113.1": "www.example.co.uk", "2a00:1450::5": "host.slac.stanford.edu",
                       "203.0.113.77": None, "198.51.66.7": None, "not-an-address": None, "198.18.0.9": "gw.lan"}
    assert r.status["198.51.66.7"] == rdns.TIMED_OUT and r.status["203.0.113.77"] == rdns.UNKNOWN
    assert (r.counts["resolved"], r.counts["unknown"], r.counts["timed_out"]) == (3, 2, 1)
    # answers (and NXDOMAIN) are cached; the timeout and the failure are asked again
    assert r.counts["cache_entries"] == 4
    queries = dns_server.log.read_text().count("query[PTR]")
    again = rdns.resolve(addrs, settings(dns_server), cache)
    assert again.names == r.names and again.counts["cached"] == 4 and again.counts["asked"] == 2
    asked = dns_server.log.read_text().count("query[PTR]") - queries
    assert asked == 1  # only the timed-out name reached the server ("not-an-address" never leaves)
    # past the TTL every entry is asked again
    later = rdns.resolve(addrs[:1], settings(dns_server, cache_ttl_hours=1.0), cache, now=time.time() + 7200)
    assert later.counts["cached"] == 0 and later.names["203.0.113.1"] == "www.example.co.uk"
    # the cache's bound: least recently used go first
    bounded = rdns.resolve(["203.0.113.2"], settings(dns_server, cache_max_entries=2), cache)
    assert bounded.counts["cache_entries"] == 2
    kept = rdns.Cache(cache, 86400, 2).get(["203.0.113.2", "203.0.113.1", "2a00:1450::5"], time.time())
    assert set(kept) == {"203.0.113.2", "203.0.113.1"}


@pytest.mark.integration
def test_budget_and_rate_bound_a_report(dns_server):
    """50 names that time out, 10 lookups/s for at most 1 s: the run ends with most never
    asked (unknown), whatever the load, and says how many of each."""
    addrs = [f"198.51.66.{i}" for i in range(1, 51)]
    r = rdns.resolve(addrs, settings(dns_server, rate=10.0, budget_seconds=1.0, timeout_seconds=5.0))
    assert set(r.names.values()) == {None}
    assert r.counts["not_tried"] >= 50 - 11 and r.counts["timed_out"] == 50 - r.counts["not_tried"]
    capped = rdns.resolve(["203.0.113.1", "203.0.113.2"], settings(dns_server, max_lookups=1))
    assert capped.status == {"203.0.113.1": rdns.RESOLVED, "203.0.113.2": rdns.NOT_TRIED}


def test_offline_every_name_is_unknown_and_nothing_fails(tmp_path):
    port = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    port.bind(("127.0.0.1", 0))  # bound and never read: a resolver that is gone
    s = rdns.Settings(server="127.0.0.1", port=port.getsockname()[1], timeout_seconds=0.3, budget_seconds=2.0)
    r = rdns.resolve(["203.0.113.1", "2a00:1450::5"], s, tmp_path / "c.sqlite")
    port.close()
    assert r.names == {"203.0.113.1": None, "2a00:1450::5": None}
    assert r.counts["resolved"] == 0 and r.counts["cache_entries"] == 0


def test_a_silent_resolver_is_given_up_after_its_first_timeouts(silent_port):
    """Offline (the demo's DNS server down, no route to the site's resolver) a report used to
    spend its whole budget on timeouts; once SILENT_AFTER lookups timed out before any answer
    the rest are not asked, and the counts say why."""
    addrs = [f"198.51.{i // 250}.{i % 250 + 1}" for i in range(400)]
    s = rdns.Settings(server="127.0.0.1", port=silent_port, timeout_seconds=0.3, budget_seconds=120.0)
    r = rdns.resolve(addrs, s)
    assert r.counts["resolver_silent"] is True and set(r.names.values()) == {None}
    # the ones in flight when it was decided still time out; nothing after them is asked
    assert rdns.SILENT_AFTER <= r.counts["timed_out"] <= rdns.SILENT_AFTER + s.concurrency
    assert r.counts["not_tried"] == 400 - r.counts["timed_out"]


@pytest.mark.integration
def test_a_resolver_that_answers_anything_is_asked_on(dns_server):
    """One answer first, then 40 names forwarded to a server that never answers: the resolver
    is alive (slow for some zones), so every name is asked."""
    addrs = ["203.0.113.1"] + [f"198.51.66.{i}" for i in range(1, 41)]
    r = rdns.resolve(addrs, settings(dns_server, timeout_seconds=0.3, budget_seconds=60.0))
    assert r.counts["resolver_silent"] is False and r.names["203.0.113.1"] == "www.example.co.uk"
    assert (r.counts["timed_out"], r.counts["not_tried"]) == (40, 0)


def test_settings_errors_name_the_key(tmp_path):
    cfg = private_cfg(tmp_path, FLOWLAKE_RDNS_RATE="0")
    with pytest.raises(ValueError, match=r"\[rdns\] rate"):
        rdns.Settings.from_config(cfg)
    cfg = private_cfg(tmp_path, FLOWLAKE_RDNS_SERVER="dns.example")
    with pytest.raises(ValueError, match="not an IP address"):
        rdns.Settings.from_config(cfg)


# ---- the reports over a modelled day -----------------------------------------------------
@pytest.fixture(scope="module")
def model_day(tmp_path_factory):
    """8,000 modelled flows of one day in a private lake, the model's arrays beside them."""
    home = tmp_path_factory.mktemp("border-home")
    p = api.params_for("ipfix")
    start = int(dt.datetime.combine(DAY, dt.time(), dt.timezone.utc).timestamp() * 1000)
    f, _ = model.generate(p, start, 86_400_000, 8000, seed=26)
    table = lake_rows.lake_table(f, p, source_file="model")
    hours = table.column("hour").to_numpy()
    for h in np.unique(hours):
        part = home / "lake" / "flows" / f"date={DAY}" / f"hour={h:02d}"
        part.mkdir(parents=True)
        pq.write_table(table.filter(hours == h), part / "part-0.parquet")
    rates = np.array([r.sampling_rate for r in p.routers], np.int64)[f["router"]]
    return {"home": home, "flows": f, "table": table, "params": p,
            "bytes": f["bytes"].astype(np.int64) * rates, "packets": f["packets"].astype(np.int64) * rates}


@pytest.mark.integration
def test_remote_domains_against_the_model(spark, model_day, tmp_path_factory, silent_port):
    from flowlake.jobs import runner

    f, table = model_day["flows"], model_day["table"]
    remote = np.where(f["inbound"], table.column("src_addr").to_numpy(zero_copy_only=False),
                      table.column("dst_addr").to_numpy(zero_copy_only=False))
    by_bytes = defaultdict(int)
    for a, b in zip(remote, model_day["bytes"]):
        by_bytes[a] += int(b)
    busiest = sorted(by_bytes, key=lambda a: (-by_bytes[a], a))
    # names for the 30 busiest remote hosts (three domains under edu, one under co.uk, one
    # without a public suffix), the 31st's /24 forwarded to a server that never answers
    domains = [("stanford.edu", "edu"), ("cern.ch", "ch"), ("example.co.uk", "uk"), ("fnal.gov", "gov"),
               ("mit.edu", "edu")]
    expected_domain, ptr = {}, {}
    for i, a in enumerate(busiest[:30]):
        dom, tld = domains[i % len(domains)]
        ptr[a], expected_domain[a] = f"h{i}.dept.{dom}", (dom, tld)
    lame = busiest[30]
    assert ipaddress.ip_address(lame).version == 4 and not any(
        ipaddress.ip_address(a) in ipaddress.ip_network(f"{lame}/24", strict=False) for a in busiest[:30])
    srv = dnsmasq.start(tmp_path_factory.mktemp("dnsmasq-day"), ptr,
                        {str(ipaddress.ip_network(f"{lame}/24", strict=False)): ("127.0.0.1", silent_port)})
    try:
        cfg = private_cfg(model_day["home"], FLOWLAKE_RDNS_SERVER="127.0.0.1", FLOWLAKE_RDNS_PORT=str(srv.port),
                          FLOWLAKE_RDNS_MAX_LOOKUPS="40", FLOWLAKE_RDNS_TIMEOUT_SECONDS="0.5",
                          FLOWLAKE_RDNS_BUDGET_SECONDS="30")
        out = runner.run_jobs(spark, cfg, DAY, runner.order(runner.discover(), ["remote_domains"]))
    finally:
        srv.stop()
    assert [(o.job, o.status, o.error) for o in out] == [("remote_domains", "ok", "")]
    rows = pq.read_table(cfg.lake / "reports" / "remote_domains" / f"date={DAY}").to_pylist()

    want = defaultdict(lambda: [0, 0, 0, set()])  # (direction, level, name) -> flows, packets, bytes, hosts
    for i, a in enumerate(remote):
        dom, tld = expected_domain.get(a, ("(unknown)", "(unknown)"))
        for direction in ("all", "inbound" if f["inbound"][i] else "outbound"):
            for level, name in (("domain", dom), ("tld", tld)):
                w = want[(direction, level, name)]
                w[0] += 1
                w[1] += int(model_day["packets"][i])
                w[2] += int(model_day["bytes"][i])
                w[3].add(a)
    got = {(r["direction"], r["level"], r["name"]): [r["flows"], r["packets"], r["bytes"], r["hosts"]] for r in rows}
    assert got == {k: [v[0], v[1], v[2], len(v[3])] for k, v in want.items()}
    top = sorted((r for r in rows if r["direction"] == "all" and r["level"] == "tld"), key=lambda r: r["rank"])
    assert [r["bytes"] for r in top] == sorted((r["bytes"] for r in top), reverse=True)
    assert sum(r["bytes_share"] for r in top) == pytest.approx(1.0)
    # `flowlake status` (and --json) shows the cache and the last report's counts
    env = {**os.environ, "FLOWLAKE_HOME": str(model_day["home"]), "COLUMNS": "250"}
    st = json.loads(run([sys.executable, "-m", "flowlake.cli", "status", "--json"], env=env).stdout)["rdns"]
    assert st["last_run"]["resolved"] == 30 and st["last_run"]["timed_out"] == 1 and st["last_run"]["date"] == str(DAY)
    assert st["last_run"]["unknown"] == 9 and st["cache_entries"] == 39  # 30 names + 9 NXDOMAIN
    assert st["cache_max_entries"] == 200000 and st["cache_bytes"] > 0
    text = run([sys.executable, "-m", "flowlake.cli", "status"], env=env).stdout
    assert "reverse DNS (remote_domains): cache 39 of 200,000" in text and "30 resolved, 9 unknown, 1 timed out" in text


@pytest.mark.integration
def test_flow_durations_against_the_model(spark, model_day):
    from flowlake.jobs import runner

    cfg = private_cfg(model_day["home"], FLOWLAKE_REPORTS_TOP_N="100")
    out = runner.run_jobs(spark, cfg, DAY, runner.order(runner.discover(), ["flow_durations", "app_mix"]))
    assert all(o.status == "ok" for o in out), [(o.job, o.error) for o in out]
    rows = pq.read_table(cfg.lake / "reports" / "flow_durations" / f"date={DAY}").to_pylist()
    f = model_day["flows"]
    dur = (f["t_end"] - f["t_start"]) / 1000.0
    edges = [0.0, 1.0, 10.0, 60.0, 300.0, 1800.0, np.inf]
    labels = ["0-1 s", "1-10 s", "10-60 s", "1-5 min", "5-30 min", ">= 30 min"]
    klass = np.digitize(dur, edges[1:-1])
    by_bytes = model_day["bytes"]
    for direction, sel in (("all", np.ones(len(f), bool)), ("inbound", f["inbound"]), ("outbound", ~f["inbound"])):
        mine = {r["duration_class"]: r for r in rows if r["direction"] == direction and r["section"] == "class"}
        assert set(mine) == {"all"} | {labels[k] for k in np.unique(klass[sel])}
        for k, label in enumerate(labels):
            s = sel & (klass == k)
            if not s.any():
                continue
            r = mine[label]
            assert (r["flows"], r["bytes"]) == (int(s.sum()), int(by_bytes[s].sum())), (direction, label)
            assert r["class_lower_s"] == edges[k]
            assert r["duration_total_s"] == pytest.approx(dur[s].sum())
            assert r["duration_p50_s"] == np.percentile(dur[s], 50, method="inverted_cdf")
            assert r["duration_max_s"] == dur[s].max()
            assert r["bytes_share"] == pytest.approx(by_bytes[s].sum() / by_bytes[sel].sum())
        r = mine["all"]
        assert r["flows"] == int(sel.sum()) and r["duration_mean_s"] == pytest.approx(dur[sel].mean())
        for p in (50, 90, 99):
            assert r[f"duration_p{p}_s"] == np.percentile(dur[sel], p, method="inverted_cdf"), (direction, p)
    # the bulk transfers' 60 s records put their applications at the top of flow time
    apps = sorted((r for r in rows if r["direction"] == "all" and r["section"] == "app"), key=lambda r: r["rank"])
    assert [r["duration_total_s"] for r in apps] == sorted((r["duration_total_s"] for r in apps), reverse=True)
    assert sum(r["duration_total_s"] for r in apps) == pytest.approx(dur.sum())
    mix = {r["app"]: r for r in pq.read_table(cfg.lake / "reports" / "app_mix" / f"date={DAY}").to_pylist()
           if r["hour"] is None and r["direction"] == "all"}
    assert {r["app"]: (r["flows"], r["bytes"]) for r in apps} == {a: (m["flows"], m["bytes"]) for a, m in mix.items()}
    assert {"bbftp", "gridftp"} & {r["app"] for r in apps[:3]}
