"""Pure figures of a lab run: paced-stream metrics from both ends' timestamps, iperf3
JSON to throughput/RTT/loss, and the Mathis bound. No I/O here."""
from __future__ import annotations

import math

MATHIS_C = math.sqrt(1.5)  # periodic-loss constant of Mathis et al. 1997


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def paced(client: dict, server: dict, deadline_ms: float) -> dict:
    """Figures of one paced run.

    latency: arrival minus the time the frame was due (so a frame the sender could not
    send on time is late by that much too); dropped: due but never arrived; missed
    deadlines: arrived later than `deadline_ms` after it was due; maximum inter-frame
    delay: the longest silence between consecutive arrivals at the receiver.
    """
    scheduled = int(client["scheduled"])
    seen: dict[int, tuple] = {}
    for seq, due, _sent, recv in server.get("frames", []):
        seen.setdefault(int(seq), (due, recv))
    lat = [(recv - due) * 1000.0 for due, recv in seen.values()]
    arrivals = sorted(recv for _, recv in seen.values())
    gaps = [(b - a) * 1000.0 for a, b in zip(arrivals, arrivals[1:])]
    span = scheduled / float(client["rate"])
    return {
        "achieved_rate": len(seen) / span if span > 0 else 0.0,
        "latency_p50": quantile(lat, 0.5),
        "latency_p99": quantile(lat, 0.99),
        "max_inter_frame_delay": max(gaps) if gaps else None,
        "dropped_frames": float(scheduled - len(seen)),
        "missed_deadlines": float(sum(1 for x in lat if x > deadline_ms)),
        "loss": (scheduled - len(seen)) / scheduled if scheduled else None,
        "frames_sent": float(scheduled),
    }


def mathis_bound(mss_bytes: float, rtt_ms: float | None, loss: float | None) -> float | None:
    """Upper bound on one TCP flow's rate, bit/s: MSS/RTT * C/sqrt(p). None without loss or RTT."""
    if not rtt_ms or not loss or rtt_ms <= 0 or loss <= 0:
        return None
    return mss_bytes * 8 / (rtt_ms / 1000.0) * MATHIS_C / math.sqrt(loss)


def iperf3(doc: dict, mss_default: int = 1460, zero_loss_rule: str = "upper_bound") -> dict:
    """iperf3 -J output -> throughput (receiver), RTT and loss; Mathis bound for TCP.

    TCP loss is estimated as retransmitted segments over segments sent (bytes / MSS);
    with no retransmission, `upper_bound` takes p = 1/(segments + 1) ([active]
    zero_loss_rule), so the bound stays finite and conservative.
    """
    if "error" in doc and not doc.get("end"):
        raise ValueError(f"iperf3 failed: {doc['error']}")
    end = doc["end"]
    udp = doc["start"]["test_start"]["protocol"] == "UDP"
    if udp:
        s = end["sum"]
        return {"throughput": float(s["bits_per_second"]), "loss": float(s.get("lost_percent", 0.0)) / 100.0,
                "bytes_sent": float(s.get("bytes", 0))}
    sent, recv = end["sum_sent"], end["sum_received"]
    mss = int(doc["start"].get("tcp_mss_default") or mss_default)
    rtts = [st["sender"]["mean_rtt"] / 1000.0 for st in end.get("streams", []) if st.get("sender", {}).get("mean_rtt")]
    rtt = sum(rtts) / len(rtts) if rtts else None
    segments = max(1.0, float(sent["bytes"]) / mss)
    retrans = float(sent.get("retransmits", 0) or 0)
    loss = retrans / segments
    basis = loss if loss > 0 else (1.0 / (segments + 1) if zero_loss_rule == "upper_bound" else None)
    streams = max(1, len(end.get("streams", [])))
    bound = mathis_bound(mss, rtt, basis)
    return {"throughput": float(recv["bits_per_second"]), "rtt": rtt, "loss": loss,
            "mathis_bound": bound * streams if bound else None, "bytes_sent": float(sent["bytes"])}


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least squares y = a*x + l (as jobs/path_models fits it); None below two sizes."""
    xs = {x for x, _ in points}
    if len(xs) < 2:
        return None
    n = len(points)
    sx = sum(x for x, _ in points)
    sy = sum(y for _, y in points)
    sxx = sum(x * x for x, _ in points)
    sxy = sum(x * y for x, y in points)
    a = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    return a, (sy - a * sx) / n


def split(a_a, l_a, a_b, l_b, size) -> tuple[float, float, float]:
    """Bytes on A, bytes on B, delivery ms, for one message of `size` bytes."""
    x = (a_b * size + l_b - l_a) / (a_a + a_b) if (a_a + a_b) > 0 else size
    x = min(max(x, 0.0), size)
    t_a = a_a * x + l_a if x > 0 else 0.0
    t_b = a_b * (size - x) + l_b if size - x > 0 else 0.0
    return x, size - x, max(t_a, t_b)
