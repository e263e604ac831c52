"""`flowlake powerlaw FILE`: fit a power law to one column of numbers."""
from __future__ import annotations

import json
import math
from pathlib import Path

import click

from flowlake.base import spark as spark_factory

from .bootstrap import bootstrap_p
from .fit import fit as fit_power_law
from .sample import SampleError
from .textfile import InputError, read_numbers


def _num(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


@click.command("powerlaw")
@click.argument("file", type=click.Path(dir_okay=False, path_type=str))
@click.option("--discrete/--continuous", default=None,
              help="Fit the discrete (Hurwitz zeta) or continuous power law. "
                   "Default: discrete when every value is an integer.")
@click.option("--scale", type=float, default=1.0, show_default=True,
              help="Multiply every value by F first (CSN fit blackouts as x * 1e-3).")
@click.option("--bootstrap", "replicates", type=click.IntRange(min=0), default=0, show_default=True,
              help="Goodness-of-fit p from N semi-parametric bootstrap replicates (CSN: 1000).")
@click.option("--xmin", type=float, default=None, help="Fix xmin instead of scanning every value.")
@click.option("--min-tail", type=click.IntRange(min=2), default=50, show_default=True,
              help="Flag the fit insufficient when the tail has fewer observations.")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap random seed.")
@click.option("--spark", is_flag=True, help="Run bootstrap replicates as Spark tasks (local[2] "
              "unless FLOWLAKE_SPARK_MASTER says otherwise).")
@click.option("--no-compare", is_flag=True, help="Skip the likelihood-ratio tests.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def powerlaw(file, discrete, scale, replicates, xmin, min_tail, seed, spark, no_compare, as_json):
    """Fit a power law to the numbers in FILE (Clauset, Shalizi & Newman 2009).

    FILE holds one number per line; blank lines and # comments are skipped. xmin is
    chosen by minimising the Kolmogorov-Smirnov distance over every distinct value,
    alpha by maximum likelihood; the power law is then tested against lognormal,
    exponential, stretched exponential and power law with cutoff (R > 0 favours
    the power law; p < 0.1 says the sign of R is significant).

    \b
    Examples:
      flowlake powerlaw words.txt --discrete
      flowlake powerlaw blackouts.txt --continuous --scale 1e-3 --bootstrap 1000
      flowlake powerlaw flow_bytes.txt --json | jq .alpha
    """
    import numpy as np  # noqa: PLC0415  (start-up: numpy)

    from .compare import compare_all  # noqa: PLC0415  (start-up: scipy)

    try:
        x = read_numbers(file, scale)
    except InputError as exc:
        raise click.ClickException(str(exc)) from None
    if discrete is None:
        discrete = bool(np.all(x == np.round(x)))
    try:
        res = fit_power_law(x, discrete=discrete, xmin=xmin, min_tail=min_tail)
    except SampleError as exc:
        raise click.ClickException(f"{file}: {exc}") from None
    out = res.to_dict()
    if not no_compare and not res.insufficient:
        out["compare"] = {k: v.to_dict() for k, v in compare_all(res).items()}
    if replicates and not res.insufficient:
        out.update(_bootstrap(res, replicates, seed, spark, quiet=as_json))
    if as_json:
        click.echo(json.dumps(_clean(out), indent=2))
    else:
        _print(file, out)
    if res.insufficient:
        raise click.ClickException(f"{file}: fit insufficient: {res.reason}")


def _bootstrap(res, replicates, seed, use_spark, quiet):
    if use_spark:
        session = spark_factory.session("flowlake-powerlaw")
        b = bootstrap_p(res, replicates, seed=seed, spark=session)
    else:
        from rich.progress import Progress  # noqa: PLC0415  (start-up: rich)

        with Progress(transient=True, disable=quiet) as bar:
            task = bar.add_task("bootstrap", total=replicates)
            b = bootstrap_p(res, replicates, seed=seed, progress=lambda: bar.advance(task))
    return {"p": b.p, "replicates": b.replicates}


def _clean(o):
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, float):
        return _num(o)
    return o


def _print(file, out):
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    con = Console()
    kind = "discrete" if out["discrete"] else "continuous"
    t = Table(title=f"{Path(file).name}: {kind} power law", show_header=False)
    for key in ("xmin", "alpha", "sigma", "n_tail", "n", "D", "p", "replicates"):
        if key in out:
            v = out[key]
            t.add_row(key, f"{v:.6g}" if isinstance(v, float) else str(v))
    if out["insufficient"]:
        t.add_row("insufficient", out["reason"])
    con.print(t)
    if "compare" in out:
        c = Table(title="likelihood ratio vs alternatives (R > 0 favours the power law)")
        for col in ("alternative", "R", "p", "test"):
            c.add_column(col)
        for name, v in out["compare"].items():
            c.add_row(name, f"{v['R']:.4g}", f"{v['p']:.4g}", "nested, chi2(1)" if v["nested"] else "Vuong")
        con.print(c)
