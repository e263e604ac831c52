"""Power-law fits of heavy-tailed data (Clauset, Shalizi & Newman 2009), exact and fast.

    from flowlake.jobs.powerlaw import Sample, fit, compare_all, bootstrap_p
    res = fit(Sample.from_values(sizes), discrete=True)
    res.xmin, res.alpha, res.sigma, res.n_tail, res.D
"""
from .sample import Sample, SampleError  # noqa: F401
from .fit import PowerLawFit, fit, DEFAULT_MIN_TAIL  # noqa: F401
