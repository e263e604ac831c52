"""Power-law fits of heavy-tailed data (Clauset, Shalizi & Newman 2009), exact and fast.

    from flowlake.jobs.powerlaw import Sample, fit, compare_all, bootstrap_p
    res = fit(Sample.from_values(sizes), discrete=True)
    res.xmin, res.alpha, res.sigma, res.n_tail, res.D
"""
from .fit import DEFAULT_MIN_TAIL, PowerLawFit, fit  # noqa: F401
from .sample import Sample, SampleError  # noqa: F401
