"""Power-law fits (issue 5): cross-checked against the `powerlaw` package (its exhaustive
xmin scan and its likelihood ratios, computed live here), CSN's published reference
fits (the package ships the same data files), brute force, and known synthetic laws."""
from __future__ import annotations

import datetime as dt
import json
import os
import warnings

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import optimize, special

from flowlake.jobs.powerlaw import Sample, SampleError, fit
from flowlake.jobs.powerlaw.bootstrap import bootstrap_p, draw_power_law
from flowlake.jobs.powerlaw.cli import powerlaw as powerlaw_cmd
from flowlake.jobs.powerlaw.compare import compare_all
from flowlake.jobs.powerlaw.fit import _Scan

import powerlaw as powerlaw_pkg  # noqa: E402  (requirements.txt pins it: an import error fails, never skips)
REF = os.path.join(os.path.dirname(powerlaw_pkg.__file__), "reference_data")
ALTS = ("lognormal", "exponential", "stretched_exponential", "truncated_power_law")


def ref_data(name):
    path = os.path.join(REF, name)
    if not os.path.exists(path):
        pytest.fail(f"the powerlaw package no longer ships {path}")
    return np.loadtxt(path)


def package_fit(x, discrete):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return powerlaw_pkg.Fit(x, discrete=discrete, xmin=None, estimate_discrete=False, verbose=0)


@pytest.fixture(scope="module")
def words():
    x = ref_data("words.txt")
    return x, fit(x, discrete=True), package_fit(x, True)


@pytest.fixture(scope="module")
def blackouts():
    x = ref_data("blackouts.txt") * 1e-3
    return x, fit(x, discrete=False), package_fit(x, False)


def pareto(rng, n, alpha, xmin):
    return xmin * (1 - rng.random(n)) ** (-1 / (alpha - 1))


def mixture(rng, n, alpha, xmin, tail_share=0.3):
    """Lognormal body below xmin, Pareto tail above: the true xmin is known."""
    nt = int(n * tail_share)
    body = rng.lognormal(np.log(xmin) - 1.0, 0.8, 4 * n)
    body = body[body < xmin][: n - nt]
    return np.concatenate([body, pareto(rng, nt, alpha, xmin)])


# ---- CSN reference data sets --------------------------------------------------------------
def test_words_discrete_reproduces_published_fit(words):
    x, res, pkg = words
    assert res.discrete and res.xmin == 7 and res.n_tail == 2958
    assert abs(res.alpha - 1.95) < 0.005
    assert abs(res.alpha - pkg.alpha) < 0.005 and res.xmin == pkg.xmin
    assert abs(res.D - pkg.D) < 1e-3
    assert 0.015 < res.sigma < 0.025          # CSN: 1.95(2)


def test_blackouts_continuous_reproduces_published_fit(blackouts):
    x, res, pkg = blackouts
    assert res.xmin == 230 and res.n_tail == 59
    assert abs(res.alpha - 2.27) < 0.005 and abs(res.alpha - pkg.alpha) < 1e-9
    assert res.D == pytest.approx(pkg.D, abs=1e-12)
    assert res.sigma == pytest.approx((res.alpha - 1) / np.sqrt(59))


@pytest.mark.parametrize("which", ["words", "blackouts"])
def test_likelihood_ratios_match_package(which, request):
    x, res, pkg = request.getfixturevalue(which)
    ours = compare_all(res)
    for alt in ALTS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            R, p = pkg.distribution_compare("power_law", alt, normalized_ratio=True)
        assert abs(ours[alt].R - R) < 0.05, (alt, ours[alt].R, R)
        assert abs(ours[alt].p - p) < 0.05, (alt, ours[alt].p, p)
    assert ours["truncated_power_law"].nested and not ours["lognormal"].nested
    assert ours["exponential"].R > 1   # both data sets beat the exponential (CSN table 6.1)


def test_unbounded_alternative_likelihood_gives_no_verdict():
    """An alternative whose likelihood is unbounded (+inf log-likelihood: a lognormal
    collapsed onto one value of a tiny tail) makes the ratio test undefined: nan (null
    in the report), not R=0/p=1, and no numpy warnings on the way."""
    from flowlake.jobs.powerlaw.compare import _ratio

    w = np.array([3.0, 1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        R, p, raw = _ratio(np.array([-1.0, -2.0, -3.0]), np.array([np.inf, -2.5, -1.0]), w, False)
        assert np.isnan(R) and np.isnan(p) and np.isnan(raw)
        R, p, _ = _ratio(np.array([-1.0, -2.0, -3.0]), np.array([-1.5, -2.2, -3.9]), w, False)
    assert R > 0 and 0 < p < 1


# ---- fast special functions against the slow references ------------------------------------
def test_hurwitz_zeta_equals_scipy():
    from flowlake.jobs.powerlaw.zeta import hurwitz_zeta

    rng = np.random.default_rng(11)
    a = rng.uniform(1.0001, 60, 50_000)
    x = np.floor(10 ** rng.uniform(0, 9, 50_000))
    ours, ref = hurwitz_zeta(a, x), special.zeta(a, x)
    normal = ref > 1e-300            # below, both are underflow (the callers then use logs)
    assert normal.sum() > 40_000 and (x >= 100).sum() > 30_000   # both branches exercised
    assert np.max(np.abs(ours[normal] / ref[normal] - 1)) < 1e-12


def test_cutoff_normalisation_equals_lerchphi():
    """log sum_{x>=q} x^-a e^-lam x against mpmath's Lerch phi at 30 digits (at its default
    15 digits mpmath itself is off by ~1e-9 for lam near 0), on both of our branches."""
    import mpmath

    from flowlake.jobs.powerlaw.zeta import log_cutoff_sum

    rng = np.random.default_rng(5)
    with mpmath.workdps(30):
        for _ in range(60):
            a, lam = float(rng.uniform(0.05, 4.5)), float(10 ** rng.uniform(-9, 1))
            q = float(np.floor(10 ** rng.uniform(0, 6.5)))
            ref = float(mpmath.log(mpmath.lerchphi(mpmath.exp(-lam), a, q)) - lam * q)
            assert log_cutoff_sum(a, lam, q) == pytest.approx(ref, rel=1e-11, abs=1e-11), (a, lam, q)


# ---- exactness of the pruned scan ---------------------------------------------------------------
@pytest.mark.parametrize("discrete", [False, True])
def test_pruned_scan_equals_brute_force(discrete):
    rng = np.random.default_rng(7)
    for trial in range(6):
        x = mixture(rng, int(rng.integers(300, 3000)), rng.uniform(1.6, 3.4), 20.0)
        if discrete:
            x = np.floor(x) + 1
        s = Sample.from_values(x)
        res = fit(s, discrete=discrete, min_tail=0)
        scan = _Scan(s, discrete, None)
        D = np.array([scan.exact_D(j) if scan.valid[j] else np.inf for j in range(scan.J)])
        j = int(np.argmin(D))
        assert res.xmin == s.values[j] and res.D == D[j]
        assert res.evaluated < scan.J        # the bound really pruned


def test_discrete_alpha_is_the_exact_hurwitz_zeta_mle():
    rng = np.random.default_rng(3)
    x = np.floor(mixture(rng, 3000, 2.3, 8.0)) + 1
    s = Sample.from_values(x)
    scan = _Scan(s, True, None)
    for j in (0, 5, 20, 60):
        tail = s.expand()[s.expand() >= s.values[j]]
        nll = lambda a: a * np.log(tail).sum() + tail.size * np.log(special.zeta(a, s.values[j]))  # noqa: E731
        ref = optimize.minimize_scalar(nll, bounds=(1.0001, 20), method="bounded",
                                       options={"xatol": 1e-10}).x
        assert abs(scan.alpha[j] - ref) < 1e-6
        approx = 1 + tail.size / np.log(tail / (s.values[j] - 0.5)).sum()
        assert scan.alpha[j] != approx      # not just CSN's eq. 3.7 approximation


# ---- synthetic samples: known law, and the package's exhaustive scan -----------------------------
@pytest.mark.parametrize("seed,alpha,discrete", [(11, 2.5, False), (12, 2.1, False), (13, 2.4, True)])
def test_matches_package_exhaustive_scan(seed, alpha, discrete):
    rng = np.random.default_rng(seed)
    x = mixture(rng, 1500, alpha, 30.0)
    if discrete:
        x = np.floor(x) + 1
    pkg = package_fit(x, discrete)
    # the package treats alpha >= 3 as invalid: ask for the same rule to compare like for like
    res = fit(x, discrete=discrete, min_tail=0, max_alpha=3.0)
    assert res.xmin == pkg.xmin
    assert abs(res.alpha - pkg.alpha) < (1e-9 if not discrete else 5e-4)
    assert res.n_tail == pkg.n_tail


@pytest.mark.parametrize("alpha", [1.8, 2.5, 3.5])
def test_recovers_known_alpha_and_xmin(alpha):
    # 20 fixed-seed samples: a single sample may miss by 2-3 sigma (sigma ignores the
    # uncertainty of xmin, CSN 3.5), so check the estimator's behaviour over several.
    fits = [fit(mixture(np.random.default_rng(seed), 4000, alpha, 50.0)) for seed in range(20)]
    z = np.array([(f.alpha - alpha) / f.sigma for f in fits])
    assert abs(z.mean()) < 0.8 and np.mean(np.abs(z) < 2) >= 0.7, z
    assert abs(np.median([f.xmin for f in fits]) / 50.0 - 1) < 0.1
    if alpha > 3:      # powerlaw v2 would silently reject these fits
        assert np.median([f.alpha for f in fits]) > 3.3


def test_pure_pareto_discrete_recovered():
    rng = np.random.default_rng(5)
    k = draw_power_law(rng, 5000, 2.2, 5.0, True)
    res = fit(k, discrete=True)
    assert abs(res.alpha - 2.2) < 2 * res.sigma and 5 <= res.xmin <= 20


def test_discrete_sampler_has_the_zeta_pmf():
    rng = np.random.default_rng(0)
    alpha, xmin, n = 2.5, 3.0, 200_000
    k = draw_power_law(rng, n, alpha, xmin, True)
    assert k.min() == xmin and np.all(k == np.round(k))
    for v in (3, 4, 5, 10, 30):
        expected = n * v ** -alpha / special.zeta(alpha, xmin)
        assert abs(np.sum(k == v) - expected) < 5 * np.sqrt(expected)
    far = special.zeta(alpha, 5000) / special.zeta(alpha, xmin) * n   # beyond the lookup table
    assert abs(np.sum(k >= 5000) - far) < 5 * np.sqrt(far)


# ---- bootstrap ---------------------------------------------------------------------------------
def test_bootstrap_p_blackouts(blackouts):
    _, res, _ = blackouts
    b = bootstrap_p(res, 300, seed=1)
    assert b.replicates == 300 and 0.48 < b.p < 0.76          # CSN: p = 0.62
    assert bootstrap_p(res, 20, seed=4).D == bootstrap_p(res, 20, seed=4).D


def test_bootstrap_decides_replicates_early_with_the_same_p(blackouts):
    """p only asks which side of the observed D each replicate falls on: the scan that
    stops at the first candidate below it gives the same p as whole scans, on a fit that
    holds (blackouts, CSN p = 0.62: many replicates scan whole) and on ones that do not
    (a lognormal, p = 0: every replicate stops early, with a D below the observed)."""
    _, held, _ = blackouts
    rng = np.random.default_rng(11)
    rejected = fit(np.round(rng.lognormal(6, 2, 20000)) + 1, discrete=True)
    ps = []
    for res, seed in ((held, 4), (rejected, 1)):
        whole = bootstrap_p(res, 24, seed=seed, decide=False)
        early = bootstrap_p(res, 24, seed=seed)
        assert early.p == whole.p
        assert [d >= res.D for d in early.D] == [d >= res.D for d in whole.D]
        assert all(e == w or w <= e < res.D for e, w in zip(early.D, whole.D, strict=True))   # early: a bound below D
        ps.append(early.p)
    assert ps[0] > 0.3 and ps[1] == 0.0


def test_bootstrap_rejects_an_exponential():
    # small exponential samples pass (a steep power law fits their last few points);
    # with 2e4 values the best tail is long enough for the bootstrap to reject it
    rng = np.random.default_rng(2)
    res = fit(rng.exponential(10.0, 20000) + 1, min_tail=0)
    assert bootstrap_p(res, 40, seed=0).p < 0.1


@pytest.mark.integration
def test_bootstrap_on_spark_equals_local(spark, blackouts):
    _, res, _ = blackouts
    assert bootstrap_p(res, 16, seed=9, spark=spark).D == bootstrap_p(res, 16, seed=9).D


# ---- bad input ---------------------------------------------------------------------------------
def test_sample_errors():
    with pytest.raises(SampleError, match="no values"):
        Sample.from_values([])
    with pytest.raises(SampleError, match=r"#2 .*positive"):
        Sample.from_values([1.0, -3.0])
    with pytest.raises(SampleError, match="finite"):
        Sample.from_values([1.0, np.nan])
    with pytest.raises(SampleError, match="integers"):
        fit([1.5, 2.0, 3.0], discrete=True)
    s = Sample.from_pairs([5, 1, 5, 2], [1, 2, 3, 0])
    assert s.values.tolist() == [1.0, 5.0] and s.counts.tolist() == [2, 4]


def test_too_few_tail_points_is_flagged():
    res = fit(np.arange(1, 40, dtype=float), discrete=True)
    assert res.insufficient and "tail" in res.reason


def run_cli(args):
    return CliRunner().invoke(powerlaw_cmd, [str(a) for a in args])


def test_cli_json(tmp_path):
    f = tmp_path / "b.txt"
    f.write_text("# blackouts\n\n" + "\n".join(str(v) for v in ref_data("blackouts.txt")) + "\n")
    r = run_cli([f, "--continuous", "--scale", "1e-3", "--bootstrap", "20", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["xmin"] == 230 and abs(out["alpha"] - 2.2726) < 1e-3 and out["n_tail"] == 59
    assert set(out["compare"]) == set(ALTS) and {"R", "p"} <= set(out["compare"]["lognormal"])
    assert 0 <= out["p"] <= 1 and out["replicates"] == 20
    assert {"sigma", "D"} <= set(out)


@pytest.mark.parametrize("text,message", [
    ("1\n2\nabc\n", "line 3: 'abc' is not a number"),
    ("# c\n4\n\n0\n", "line 4: '0' is not positive"),
    ("1\n-2.5\n", "line 2: '-2.5' is not positive"),
    ("# only comments\n\n", "no numbers found"),
    ("1\nnan\n", "line 2: 'nan' is not a finite number"),
])
def test_cli_bad_input_names_file_and_line(tmp_path, text, message):
    f = tmp_path / "bad.txt"
    f.write_text(text)
    r = run_cli([f])
    assert r.exit_code != 0 and str(f) in r.output and message in r.output


def test_cli_insufficient_tail(tmp_path):
    f = tmp_path / "few.txt"
    f.write_text("\n".join(str(v) for v in range(1, 31)))
    r = run_cli([f, "--json"])
    assert r.exit_code == 1 and "insufficient" in r.output and '"insufficient": true' in r.output


# ---- the job -------------------------------------------------------------------------------------
def flow_rows(date, rng):
    """Hand-made flows: inbound TCP with a Pareto tail in bytes, a few UDP flows."""
    import datetime as _dt

    from flow_rows import lake_row

    rows = []
    t0 = _dt.datetime.combine(date, _dt.time(), tzinfo=_dt.timezone.utc)
    sizes = np.floor(mixture(rng, 1600, 2.2, 2000.0)).astype(int) + 1
    for i, b in enumerate(sizes):
        hour = i % 2
        ts = t0 + _dt.timedelta(hours=hour, seconds=i)
        rows.append(lake_row(time_start=ts, time_end=ts, exporter="192.0.2.1", input_if=1, output_if=2,
                             src_addr=f"203.0.113.{i % 200}", dst_addr=f"10.0.0.{i % 50}",
                             src_port=40000 + i % 1000, dst_port=443, proto=6, tcp_flags=24,
                             packets=max(1, int(b // 1000)), bytes=int(b), sampling_rate=1,
                             source_file="nfcapd.test", file_seq=1, date=date.isoformat(), hour=hour))
    for i in range(12):
        ts = t0 + _dt.timedelta(seconds=i)
        rows.append(lake_row(time_start=ts, time_end=ts, exporter="192.0.2.1", input_if=1, output_if=2,
                             src_addr="10.0.0.1", dst_addr="198.18.0.1", src_port=5000, dst_port=53, proto=17,
                             packets=1, bytes=80 + i, sampling_rate=1, source_file="nfcapd.test", file_seq=1,
                             date=date.isoformat(), hour=0))
    return rows, sizes


@pytest.mark.integration
def test_job_pure_transforms(spark):
    from flowlake.jobs import powerlaw_fits as job

    df = spark.createDataFrame(
        [(0, 6, "inbound", "https", 100, 1), (0, 6, "outbound", "https", 100, 1),
         (0, 6, "inbound", "ssh", 7, 1), (1, 17, "outbound", "dns", 80, 1)],
        "hour int, proto int, direction string, app string, bytes long, packets long")
    cls = job.classify(df, ["https"])
    got = sorted((r["hour"], r["class"], r["bytes"]) for r in cls.collect())
    assert got == [(0, "app:https", 100), (0, "app:https", 100), (0, "tcp_in", 7), (0, "tcp_in", 100),
                   (0, "tcp_out", 100), (1, "udp", 80)]
    vc = {(r["hour"], r["class"], r["metric"], r["value"]): (r["flows"], r["bytes"])
          for r in job.value_counts(cls).collect()}
    assert vc[(0, "app:https", "bytes", 100)] == (2, 200)
    assert vc[(0, "tcp_in", "packets", 1)] == (2, 107)
    tasks = job.build_tasks([tuple(k) + v for k, v in vc.items()])
    day = [t for t in tasks if t["hour"] is None and t["class"] == "tcp_in" and t["metric"] == "bytes"]
    assert day[0]["values"].tolist() == [7, 100] and day[0]["counts"].tolist() == [1, 1]


def test_build_tasks_windows_and_balanced_groups():
    """The windows from (hour, class, metric, value) pairs: one per hour and class and metric,
    plus the day's (hour None, the hours summed), values sorted; a frame gives what tuples give.
    The fits' Spark tasks: every window in exactly one group, the day windows (with their
    bootstrap) spread over the groups, no group above the mean plus the largest window."""
    import pandas as pd

    from flowlake.jobs import powerlaw_fits as job

    rng = np.random.default_rng(3)
    rows = [(h, c, m, int(v), int(rng.integers(1, 9)), float(rng.integers(40, 9000)))
            for h in range(24) for c in ("tcp_in", "udp", "app:dns") for m in ("bytes", "packets")
            for v in rng.choice(100_000, size=int(rng.integers(1, 400)), replace=False)]
    rng.shuffle(rows)
    tasks = job.build_tasks(rows)
    frame = job.build_tasks(pd.DataFrame(rows, columns=["hour", "class", "metric", "value", "flows", "bytes"]))
    assert len(tasks) == len(frame) == 24 * 3 * 2 + 3 * 2
    for a, b in zip(tasks, frame, strict=True):
        assert (a["hour"], a["class"], a["metric"]) == (b["hour"], b["class"], b["metric"])
        assert all(np.array_equal(a[k], b[k]) for k in ("values", "counts", "bytes"))
        assert np.all(np.diff(a["values"]) > 0)
    hour = [(r[3], r[4]) for r in rows if (r[0], r[1], r[2]) == (5, "udp", "bytes")]
    got = next(t for t in tasks if (t["hour"], t["class"], t["metric"]) == (5, "udp", "bytes"))
    assert list(zip(got["values"].tolist(), got["counts"].tolist(), strict=True)) == sorted(hour)
    day = next(t for t in tasks if (t["hour"], t["class"], t["metric"]) == (None, "udp", "bytes"))
    assert int(day["counts"].sum()) == sum(r[4] for r in rows if (r[1], r[2]) == ("udp", "bytes"))

    settings = {"replicates": 20, "bootstrap_hourly": False}
    groups = job.balanced_groups(tasks, settings, 8)
    assert sorted(i for g in groups for i in g) == list(range(len(tasks))) and len(groups) == 8
    cost = [job._expected_seconds(t, settings) for t in tasks]
    loads = [sum(cost[i] for i in g) for g in groups]
    assert max(loads) <= sum(cost) / 8 + max(cost)
    days = [i for i, t in enumerate(tasks) if t["hour"] is None]
    assert max(sum(i in g for i in days) for g in groups) <= 2
    assert sorted(len(g) for g in job.balanced_groups(tasks[:3], settings, 8)) == [1, 1, 1]  # no empty groups


@pytest.mark.integration
def test_job_run_writes_fits(spark, cfg, tmp_path):
    import pyarrow.parquet as pq

    from flowlake.schemas import FLOWS_TABLE
    from flowlake.jobs import powerlaw_fits as job
    from flowlake.jobs.context import JobContext

    date = dt.date(2026, 11, 20)
    rng = np.random.default_rng(42)
    rows, sizes = flow_rows(date, rng)
    flows = spark.createDataFrame(rows, FLOWS_TABLE.spark_schema())
    lake = tmp_path / "lake"
    flows.write.partitionBy("date", "hour").parquet(str(lake / "flows"))

    class Cfg:
        def __getattr__(self, name):
            return getattr(cfg, name)

    from types import SimpleNamespace

    c = Cfg()
    c.lake = lake  # a Path, as config.load gives it
    # few bootstrap replicates: the test checks plumbing, the p-value is tested above
    c.powerlaw = SimpleNamespace(min_tail=50, bootstrap_replicates=4, top_apps=2, ccdf_points=20)
    ctx = JobContext(spark=spark, cfg=c, date=date)
    job.run(ctx)
    table = pq.read_table(str(lake / "reports" / "powerlaw_fits" / f"date={date}")).to_pylist()
    day = {(r["class"], r["metric"]): r for r in table if r["hour"] is None}
    tcp = day[("tcp_in", "bytes")]
    direct = fit(sizes, discrete=True)                 # the same fit straight from numpy
    assert not tcp["insufficient"] and tcp["flows"] == len(sizes)
    assert tcp["xmin"] == direct.xmin and tcp["alpha"] == pytest.approx(direct.alpha, abs=1e-9)
    assert tcp["n_tail"] == direct.n_tail and tcp["ks_d"] == pytest.approx(direct.D)
    tail = sizes >= direct.xmin
    assert tcp["tail_share_bytes"] == pytest.approx(sizes[tail].sum() / sizes.sum())
    lr = dict(tcp["lr_r"])          # pyarrow reads a map as (key, value) pairs
    assert set(lr) == set(ALTS) and lr["exponential"] > 0
    assert len(tcp["ccdf_x"]) == len(tcp["ccdf_model"]) > 5
    assert tcp["p"] is not None and tcp["bootstrap_replicates"] == 4
    assert ("app:https", "bytes") in day
    udp = day[("udp", "bytes")]
    assert udp["insufficient"] and udp["alpha"] is None and udp["flows"] == 12
    hours = {r["hour"] for r in table if r["class"] == "tcp_in"}
    assert hours == {None, 0, 1}
    # bootstrap p only for the day's windows unless powerlaw.bootstrap_hourly
    assert all(r["bootstrap_replicates"] == 0 and r["p"] is None for r in table if r["hour"] is not None)
