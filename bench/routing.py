"""The BMP collector's load time, memory and lookup rate with real-shaped tables (issue 33).

    .venv/bin/python bench/routing.py                 # 2 routers x (1,000,000 IPv4 + 200,000 IPv6)
    .venv/bin/python bench/routing.py --tiny          # 2 x (20,000 + 4,000): a minute's check
    .venv/bin/python bench/routing.py --via gobgp     # through real speakers (below; 1 router, 1.2M routes)

The table is generated (seeded): Internet-shaped prefix lengths (IPv4 mostly /24; IPv6
mostly /48, inside /32 allocations of the RIRs' blocks), prefixes grouped by origin AS (a few
dozen thousand origins, a heavy tail), AS paths of 1-6 hops through a few hundred transit
ASes with some prepending, communities and large communities from small pools, one in three
prefixes with an extra per-prefix community.

--via bmp (default): each router's table as one BMP session (Initiation, then Route
Monitoring of the Loc-RIB, RFC 9069, or with --views all a Peer Up and pre- and post-policy
Adj-RIB-In too), encoded once and sent from its own loopback address to the collector
binary. --via gobgp: the table is written as an MRT TABLE_DUMP_V2 file (ending with a copy
of its first 5,000 records: gobgp 3.10's `mrt inject` drops its last few hundred), injected into a
Debian gobgpd (A, `gobgp mrt inject global`) that announces it to a second gobgpd (B) which
sends its Loc-RIB by BMP to the collector (one router; slower: two BGP speakers' work).

Prints: encode time, load time (first byte to every path in the table, per router and for
all), the collector's memory (Go heap in use after a GC, and its RSS), and the lookup rate
over its socket (batches of 10,000 random addresses, one connection; JSON per query, the
compact lookup_batch form, and lookup_packed, the ingest's form).

Then the routing context's cost at ingest (issue 33: at most 10 % of the ingest's CPU per
flow), in the same run: the ingest task's own work (pipelines/flow_ingest.land_messages:
FlowBatch decode, the lake columns, Parquet write; no Kafka) over --ingest-flows flows of
one exporter whose destinations are drawn (Zipf-like, from --ingest-addresses addresses)
from the loaded table and whose sources are local, with routing off (enrichment plan
without routing; and no plan at all) and on (the same plan with the collector's socket),
alternating three times; CPU = this process's plus, when on, the collector's (its share of
the lookups). The verdict is on the medians. Figures on a shared machine are indicative:
run it at idle priority (`/work/idle-run` here) and say so.
"""
from __future__ import annotations

import argparse
import ipaddress
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from flowlake.base.gobuild import ROUTING  # noqa: E402
from flowlake.collectors.routing.service import Client  # noqa: E402
from flowlake.collectors.traffic import bmp as bmpgen  # noqa: E402
from services.bgp import BmpServer, GoBGP, Neighbor, free_port  # noqa: E402

V4_LENGTHS = [(24, 60), (23, 9), (22, 10), (21, 5), (20, 5), (19, 3), (18, 2), (17, 1), (16, 3), (15, 1), (14, 1)]
V6_LENGTHS = [(48, 55), (44, 8), (40, 7), (36, 5), (32, 18), (29, 4), (47, 1), (46, 2)]


def weighted(rng: random.Random, table: list[tuple[int, int]]) -> int:
    return rng.choices([x for x, _ in table], weights=[w for _, w in table])[0]


RIR_V6_BLOCKS = [0x2001, 0x2400, 0x2600, 0x2800, 0x2a00, 0x2c00]  # /12-ish blocks the RIRs allocate from


def prefixes(rng: random.Random, n: int, v6: bool) -> list[str]:
    """IPv4: anywhere in unicast space. IPv6 as allocated: a pool of /32 (and /29) allocations
    in the RIRs' blocks, each announced whole and/or as more specifics (/36-/48)."""
    out: set[str] = set()
    allocations = [(rng.choice(RIR_V6_BLOCKS) << 16 | rng.getrandbits(20)) << 96 for _ in range(max(1, n // 6))]
    while len(out) < n:
        if v6:
            bits = weighted(rng, V6_LENGTHS)
            base = rng.choice(allocations)
            addr = base | (rng.getrandbits(96) if bits > 32 else 0)
            net = ipaddress.IPv6Network((addr >> (128 - bits) << (128 - bits), bits))
        else:
            bits = weighted(rng, V4_LENGTHS)
            addr = rng.randrange(1 << 24, 224 << 24)
            net = ipaddress.IPv4Network((addr >> (32 - bits) << (32 - bits), bits))
        out.add(str(net))
    return sorted(out)


def table(n4: int, n6: int, seed: int = 33) -> list[dict]:
    """Attribute groups: {as_path, communities, large, v4: [...], v6: [...]}; one group per
    origin AS and community set (what shares one UPDATE)."""
    rng = random.Random(seed)
    transit = [rng.randrange(1000, 64000) for _ in range(400)]
    n_origins = max(1, (n4 + n6) // 14)
    origins = [rng.randrange(1000, 4200000000) for _ in range(n_origins)]
    paths = {}
    for o in origins:
        hops = [rng.choice(transit) for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 4]))]
        path = [64501, *hops, o] + [o] * rng.choice([0, 0, 0, 0, 1, 2])
        paths[o] = path
    community_pool = [f"{rng.choice(transit)}:{rng.randrange(1, 5000)}" for _ in range(2000)]
    groups: dict[tuple, dict] = {}
    weights = [1.0 / (i + 1) ** 0.8 for i in range(n_origins)]  # a heavy tail: a few origins announce a lot
    for family, items in (("v4", prefixes(rng, n4, False)), ("v6", prefixes(rng, n6, True))):
        owners = rng.choices(origins, weights=weights, k=len(items))
        for p, o in zip(items, owners, strict=True):
            comms = (f"64501:{o % 1000}",) + ((rng.choice(community_pool),) if rng.random() < 0.33 else ())
            large = (f"64501:{o % 7}:{o % 100}",) if o % 3 == 0 else ()
            key = (o, comms, large)
            g = groups.setdefault(key, {"as_path": paths[o], "communities": list(comms), "large": list(large),
                                        "v4": [], "v6": []})
            g[family].append(p)
    return list(groups.values())


def bmp_stream(groups: list[dict], views: str, sys_name: str) -> tuple[bytes, int]:
    """One router's BMP session bytes and the paths it holds."""
    out = [bmpgen.initiation(sys_name)]
    kinds = [("0.0.0.0", 64512, False, 3)]  # the Loc-RIB
    if views == "all":
        out.append(bmpgen.peer_up("192.0.2.1", 64501))
        kinds += [("192.0.2.1", 64501, False, 0), ("192.0.2.1", 64501, True, 0)]
    paths = 0
    for g in groups:
        for family, nh in (("v4", "192.0.2.1"), ("v6", "2001:db8::1")):
            if not g[family]:
                continue
            ups = bmpgen.updates(g[family], g["as_path"], nh, g["communities"], g["large"])
            for peer, asn, post, ptype in kinds:
                hdr = bmpgen.peer_header(peer, asn, post, ptype)
                out += [struct.pack("!BIB", 3, 6 + len(hdr) + len(u), 0) + hdr + u for u in ups]
            paths += len(g[family]) * len(kinds)
    return b"".join(out), paths


def mrt_file(groups: list[dict], path: Path) -> None:
    """An MRT TABLE_DUMP_V2 file (RFC 6396) of the table, as one peer's RIB."""
    now = int(time.time())

    def record(subtype: int, body: bytes) -> bytes:
        return struct.pack("!IHHI", now, 13, subtype, len(body)) + body

    peer = struct.pack("!B4s4sI", 0x02, bytes([10, 0, 0, 9]), bytes([192, 0, 2, 9]), 64509)
    parts = [record(1, bytes([10, 0, 0, 1]) + struct.pack("!H", 0) + struct.pack("!H", 1) + peer)]
    seq = 0
    for g in groups:
        for family in ("v4", "v6"):
            for p in g[family]:
                net = ipaddress.ip_network(p)
                pfx = bytes([net.prefixlen]) + net.network_address.packed[:(net.prefixlen + 7) // 8]
                if family == "v4":
                    attrs = bmpgen.path_attributes(g["as_path"][1:], "192.0.2.9", g["communities"], g["large"])
                else:  # MP_REACH_NLRI in full: gobgp 3.10 does not read RFC 6396's abbreviated form
                    attrs = bmpgen.path_attributes(g["as_path"][1:], "2001:db8::9", g["communities"], g["large"], pfx)
                entry = struct.pack("!HIH", 0, now, len(attrs)) + attrs
                body = struct.pack("!I", seq) + pfx + struct.pack("!H", 1) + entry
                parts.append(record(2 if family == "v4" else 4, body))
                seq += 1
    # gobgp 3.10's `mrt inject` exits without flushing its gRPC stream: the last few hundred
    # records never reach gobgpd. The file ends with its first records again (no change).
    parts += parts[1:5001]
    path.write_bytes(b"".join(parts))


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def lookup_rates(client: Client, groups: list[dict], sock: Path, n: int = 50000) -> tuple[float, float, float]:
    """Lookups per second over the socket: one query object per address (`lookup`), the
    compact form (`lookup_batch`: addresses of one exporter, each distinct route once), and
    the ingest's packed form (`lookup_packed`, pipelines/enrich/routing.py's request)."""
    import pyarrow as pa  # noqa: PLC0415  (bench start-up)

    from flowlake.pipelines.enrich import routing as routing_enrich  # noqa: PLC0415  (bench start-up)

    rng = random.Random(7)
    nets = [ipaddress.ip_network(p) for g in groups[:5000] for f in ("v4", "v6") for p in g[f]]
    addrs = [str(net.network_address + rng.randrange(net.num_addresses)) for net in rng.choices(nets, k=n)]
    rates = []
    for form in ("lookup", "lookup_batch", "lookup_packed"):
        packed = routing_enrich.Lookup(str(sock), timeout=120)
        t0 = time.perf_counter()
        for i in range(0, n, 10000):
            chunk = addrs[i:i + 10000]
            if form == "lookup_packed":
                routes, index = packed.ask("127.0.0.41", pa.array(chunk))
                assert routes is not None and (index >= 0).all(), "a generated address found no route"
                continue
            res = (client.lookup_batch("127.0.0.41", chunk) if form == "lookup_batch"
                   else client.lookup([{"addr": a, "exporter": "127.0.0.41"} for a in chunk]))
            assert all(r and r["prefix"] for r in res), "a generated address found no route"
        rates.append(n / (time.perf_counter() - t0))
        packed.close()
    return rates[0], rates[1], rates[2]


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ingest_messages(groups: list[dict], n: int, addresses: int, exporter: str, per_message: int = 10000,
                    seed: int = 5) -> list[bytes]:
    """FlowBatch messages (Flow revision 3, as a shipper sends them) of n flows of one exporter:
    destinations from the table's prefixes (a heavy tail over `addresses` distinct ones, one in
    twenty outside every prefix), sources in 10.0.0.0/16."""
    import numpy as np  # noqa: PLC0415  (bench start-up)
    import pyarrow as pa  # noqa: PLC0415  (bench start-up)

    from flowlake.schemas import messages  # noqa: PLC0415  (bench start-up)
    from flowlake.schemas.flow import FLOW_REV3  # noqa: PLC0415  (bench start-up)

    rng = random.Random(seed)
    nets = [ipaddress.ip_network(p) for g in rng.sample(groups, min(len(groups), addresses))
            for p in g["v4"][:1] + g["v6"][:1]]
    pool = [str(net.network_address + rng.randrange(net.num_addresses)) for net in rng.choices(nets, k=addresses)]
    pool[::20] = [f"10.255.{i // 256 % 256}.{i % 256}" for i in range(len(pool[::20]))]  # no route
    npr = np.random.default_rng(seed)
    dst = np.array(pool, dtype=object)[np.minimum(npr.zipf(1.3, n) - 1, addresses - 1)]
    src = np.array([f"10.0.{i // 256}.{i % 256}" for i in range(4096)], dtype=object)[npr.integers(0, 4096, n)]
    schema = messages.arrow_schema(FLOW_REV3)
    t0 = 1_795_773_600_000
    out = []
    for i in range(0, n, per_message):
        k = min(per_message, n - i)
        cols = {"time_start": pa.array(np.full(k, t0 + i), pa.timestamp("ms", tz="UTC")),
                "time_end": pa.array(np.full(k, t0 + i + 500), pa.timestamp("ms", tz="UTC")),
                "exporter": pa.array([exporter] * k), "src_addr": pa.array(src[i:i + k].tolist()),
                "dst_addr": pa.array(dst[i:i + k].tolist()), "source_file": pa.array(["bench"] * k),
                "file_seq": pa.array(np.arange(i, i + k)), "proto": pa.array(np.full(k, 6, np.int32)),
                "dst_port": pa.array(np.full(k, 443, np.int32)), "packets": pa.array(np.full(k, 3)),
                "bytes": pa.array(np.full(k, 1500)), "sampling_rate": pa.array(np.ones(k, np.int32))}
        arrays = [cols[f.name] if f.name in cols else (pa.nulls(k, f.type) if f.nullable else pa.array(
            np.zeros(k, f.type.to_pandas_dtype()), f.type)) for f in schema]
        table = pa.Table.from_arrays(arrays, schema=schema)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
            w.write_table(table)
        out.append(messages.flow_batch_header(FLOW_REV3) + sink.getvalue().to_pybytes())
    return out


def ingest_cost(sock: Path, pid: int, msgs: list[bytes], flows: int, work: Path) -> None:
    """The ingest task's CPU per flow with routing off and on, alternating (module docstring)."""
    import statistics  # noqa: PLC0415  (bench start-up)

    from flowlake.pipelines import flow_ingest  # noqa: PLC0415  (bench start-up)
    from flowlake.pipelines.enrich import apply  # noqa: PLC0415  (bench start-up)

    plans = {"no plan": None, "off": apply.Plan(key="bench-off"),
             "on": apply.Plan(key="bench-on", routing_socket=str(sock))}
    cpu: dict[str, list[float]] = {k: [] for k in plans}
    for rnd in range(3):
        for mode, plan in plans.items():
            out = work / f"ingest-{mode}-{rnd}"
            c0, g0, w0 = time.process_time(), _proc_cpu(pid), time.perf_counter()
            res = flow_ingest.land_messages(((m, i, dict) for i, m in enumerate(msgs)), str(out), "b", 262144,
                                            plan=plan)
            seconds = time.perf_counter() - w0
            mine, collector = time.process_time() - c0, _proc_cpu(pid) - g0
            rows = sum(r["rows"] for r in res if r["kind"] == "file")
            assert rows == flows, f"{mode}: {rows} rows landed of {flows}"
            cpu[mode].append((mine + collector) / flows)
            print(f"  round {rnd + 1} routing {mode:8s}: {flows / seconds:10,.0f} flows/s, CPU "
                  f"{mine / flows * 1e6:.2f} us/flow here + {collector / flows * 1e6:.2f} in the collector")
            subprocess.run(["rm", "-rf", str(out)], check=True)
    med = {k: statistics.median(v) for k, v in cpu.items()}
    share = (med["on"] - med["off"]) / med["on"]
    print(f"ingest CPU per flow (median of 3): no plan {med['no plan'] * 1e6:.2f} us, routing off "
          f"{med['off'] * 1e6:.2f} us, routing on {med['on'] * 1e6:.2f} us (collector included): routing's share "
          f"of the ingest's CPU {share:.1%} (bound 10 %: {'met' if share <= 0.10 else 'NOT met'}); "
          f"vs no plan at all {(med['on'] - med['no plan']) / med['on']:.1%}")
    print(f"ingest CPU-s per million flows: routing off {med['off'] * 1e6:.2f}, on {med['on'] * 1e6:.2f} "
          f"(on/off {med['on'] / med['off']:.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--v4", type=int, default=1_000_000)
    ap.add_argument("--v6", type=int, default=200_000)
    ap.add_argument("--routers", type=int, default=2)
    ap.add_argument("--views", choices=("loc-rib", "all"), default="loc-rib")
    ap.add_argument("--via", choices=("bmp", "gobgp"), default="bmp")
    ap.add_argument("--tiny", action="store_true", help="20,000 IPv4 + 4,000 IPv6 per router")
    ap.add_argument("--ingest-flows", type=int, default=1_048_576, help="flows for the ingest cost (0: skip it)")
    ap.add_argument("--ingest-addresses", type=int, default=100_000, help="distinct destinations among them")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the speakers and the collector stop too
    if args.tiny:
        args.v4, args.v6 = 20_000, 4_000
        args.ingest_flows = min(args.ingest_flows, 524_288)  # two row groups: the second meets the answers kept

    t0 = time.perf_counter()
    groups = table(args.v4, args.v6)
    print(f"table: {args.v4:,} IPv4 + {args.v6:,} IPv6 prefixes, {len(groups):,} attribute sets "
          f"(generated in {time.perf_counter() - t0:.1f} s)")
    ROUTING.build()
    work = Path(tempfile.mkdtemp(prefix="flowlake-bench-routing-"))
    sock, port = work / "r.sock", free_port()
    proc = subprocess.Popen([str(ROUTING.binary), "--listen", f"127.0.0.1:{port}", "--socket", str(sock),
                             "--max-routes", "0"], stderr=(work / "routing.log").open("w"))
    speakers: list[GoBGP] = []
    try:
        deadline = time.monotonic() + 20
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        client = Client(path=sock, timeout=120)
        base = client.request({"op": "gc"})["memory_bytes"]
        if args.via == "bmp":
            t1 = time.perf_counter()
            stream, paths = bmp_stream(groups, args.views, "bench")
            print(f"BMP stream: {len(stream) / 2**20:,.1f} MiB per router, {paths:,} paths ({args.views}), "
                  f"encoded in {time.perf_counter() - t1:.1f} s")
            routers = [f"127.0.0.{41 + i}" for i in range(args.routers)]
            conns = [socket.create_connection(("127.0.0.1", port), source_address=(r, 0)) for r in routers]
            start = time.perf_counter()
            threads = [threading.Thread(target=c.sendall, args=(stream,)) for c in conns]
            for t in threads:
                t.start()
            expected = {r: paths for r in routers}
        else:
            mrt = work / "table.mrt"
            mrt_file(groups, mrt)
            print(f"MRT file: {mrt.stat().st_size / 2**20:,.1f} MiB")
            pa, pb = free_port("127.0.0.11"), free_port("127.0.0.12")
            a = GoBGP(work / "a", 64501, "10.0.0.1", "127.0.0.11", port=pa,
                      neighbors=[Neighbor("127.0.0.12", 64512, pb)])
            b = GoBGP(work / "b", 64512, "10.0.0.2", "127.0.0.12", port=pb,
                      neighbors=[Neighbor("127.0.0.11", 64501, pa)], bmp=[BmpServer("127.0.0.1", port, "local-rib")])
            for s in (a, b):  # in the list before it starts: one that starts but never answers is stopped too
                speakers.append(s)
                s.start(timeout=300)  # a loaded box: gobgpd answers late
            while not b.established("127.0.0.11"):
                time.sleep(0.2)
            start = time.perf_counter()
            for attempt in range(3):  # gobgp's client gives up connecting on a loaded box ("context deadline exceeded")
                res = a.cli("mrt", "inject", "global", str(mrt), timeout=3600, check=attempt == 2)  # minutes
                if res.returncode == 0:
                    break
                print(f"gobgp mrt inject failed ({res.stderr.strip()}): again")
            print(f"gobgp mrt inject: {time.perf_counter() - start:.1f} s")
            expected = {"127.0.0.1": args.v4 + args.v6}
            conns = []
        done: dict[str, float] = {}
        while len(done) < len(expected):
            st = client.request({"op": "status"})
            for r, n in expected.items():
                if r not in done and st["routers"].get(r, {}).get("paths", 0) >= n:
                    done[r] = time.perf_counter() - start
            if time.perf_counter() - start > 1800:
                raise SystemExit(f"timed out: {st['paths']:,} paths of {sum(expected.values()):,}")
            time.sleep(0.05)
        for r, s in sorted(done.items()):
            print(f"router {r}: {expected[r]:,} paths loaded in {s:.1f} s")
        client.request({"op": "gc"})
        st = client.request({"op": "gc"})  # twice: interned attributes go in a second cycle
        heap = st["memory_bytes"] - base
        print(f"all {len(expected)} routers loaded in {max(done.values()):.1f} s: {st['routes']:,} prefixes, "
              f"{st['paths']:,} paths; memory: Go heap {heap / 2**20:,.0f} MiB "
              f"({heap / max(st['paths'], 1):.0f} B/path), RSS {rss_bytes(proc.pid) / 2**20:,.0f} MiB")
        one, compact, packed = lookup_rates(client, groups, sock)
        print(f"lookups over the socket (batches of 10,000): {one:,.0f}/s one query each (JSON), "
              f"{compact:,.0f}/s lookup_batch (JSON), {packed:,.0f}/s lookup_packed (the ingest's form)")
        if args.ingest_flows:
            exporter = sorted(expected)[0]
            msgs = ingest_messages(groups, args.ingest_flows, args.ingest_addresses, exporter)
            print(f"ingest: {args.ingest_flows:,} flows of exporter {exporter} in {len(msgs)} FlowBatch messages, "
                  f"destinations from {args.ingest_addresses:,} addresses (Zipf-like)")
            ingest_cost(sock, proc.pid, msgs, args.ingest_flows, work)
        client.close()
        for c in conns:
            c.close()
    finally:
        for s in speakers:
            if s.proc is not None:
                s.stop()
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
