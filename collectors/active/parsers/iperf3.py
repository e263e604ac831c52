"""iperf3 -J JSON (TCP and UDP; streams, intervals, retransmits, RTT, congestion control)."""
from __future__ import annotations

import json
import statistics

from ..result import ParseError, make


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def load_json(path, text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(path, exc.lineno, f"not valid JSON: {exc.msg}") from None


def _need(path, obj, *keys):
    cur = obj
    for k in keys:
        if not isinstance(cur, dict) or k not in cur:
            raise ParseError(path, None, f"iperf3 JSON lacks field {'.'.join(keys)}")
        cur = cur[k]
    return cur


def parse(path, text: str, doc=None) -> list[dict]:
    doc = load_json(path, text) if doc is None else doc
    if not isinstance(doc, dict):
        raise ParseError(path, 1, "iperf3 JSON must be an object")
    if doc.get("error"):
        raise ParseError(path, None, f"iperf3 reported an error, no result: {doc['error']}")
    start = _need(path, doc, "start")
    end = _need(path, doc, "end")
    ts = _need(path, start, "timestamp", "timesecs")
    test = _need(path, start, "test_start")
    proto = str(test.get("protocol", "TCP")).upper()
    conn = (start.get("connected") or [{}])[0]
    dest = (start.get("connecting_to") or {}).get("host") or conn.get("remote_host", "")
    params = {
        "protocol": proto, "streams": test.get("num_streams"), "blksize": test.get("blksize"),
        "duration_s": test.get("duration"), "reverse": test.get("reverse"), "tos": test.get("tos"),
        "target_bitrate": test.get("target_bitrate") or start.get("target_bitrate"),
        "window": start.get("sock_bufsize") or None, "port": (start.get("connecting_to") or {}).get("port"),
        "congestion": end.get("sender_tcp_congestion"), "version": start.get("version"),
    }
    m: dict = {}
    if proto == "UDP":
        s = end.get("sum") or end.get("sum_received") or _need(path, end, "sum")
        seconds = float(s.get("seconds", 0))
        m.update(throughput_bps=s.get("bits_per_second"), bytes=s.get("bytes"), jitter_ms=s.get("jitter_ms"),
                 lost_packets=s.get("lost_packets"), packets=s.get("packets"),
                 loss=(s.get("lost_percent") or 0) / 100.0)
        ooo = sum((st.get("udp") or {}).get("out_of_order", 0) for st in end.get("streams", []))
        m["out_of_order"] = ooo
    else:
        sent = _need(path, end, "sum_sent")
        recv = end.get("sum_received") or sent
        seconds = float(sent.get("seconds", 0))
        m.update(throughput_bps=recv.get("bits_per_second"), sent_bps=sent.get("bits_per_second"),
                 bytes=recv.get("bytes"), retransmits=sent.get("retransmits"))
        senders = [st["sender"] for st in end.get("streams", []) if isinstance(st.get("sender"), dict)]
        rtts = [st for st in senders if "mean_rtt" in st]
        if rtts:  # iperf3 reports RTT in microseconds
            m["rtt_mean_ms"] = statistics.fmean(st["mean_rtt"] for st in rtts) / 1000.0
            m["rtt_min_ms"] = min(st["min_rtt"] for st in rtts) / 1000.0
            m["rtt_max_ms"] = max(st["max_rtt"] for st in rtts) / 1000.0
        cw = [st["max_snd_cwnd"] for st in senders if "max_snd_cwnd" in st]
        if cw:
            m["max_snd_cwnd_bytes"] = max(cw)
        if start.get("tcp_mss_default"):
            params["mss"] = start["tcp_mss_default"]
        for i, st in enumerate(senders):
            m[f"stream{i}_throughput_bps"] = st.get("bits_per_second")
            m[f"stream{i}_retransmits"] = st.get("retransmits")
    ivals = [iv["sum"]["bits_per_second"] for iv in doc.get("intervals", []) if "sum" in iv]
    if ivals:
        m["intervals"] = len(ivals)
        m["interval_bps_min"] = min(ivals)
        m["interval_bps_max"] = max(ivals)
        m["interval_bps_stdev"] = statistics.pstdev(ivals)
    cpu = end.get("cpu_utilization_percent") or {}
    m["cpu_host_percent"] = cpu.get("host_total")
    m["cpu_remote_percent"] = cpu.get("remote_total")
    t0 = int(ts) * 1000
    return [make("throughput", conn.get("local_host", ""), dest, t0, t0 + int(seconds * 1000),
                 params, m, "iperf3", path)]
