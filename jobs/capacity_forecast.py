"""Capacity forecast: per exporter interface and side, the trend of the daily 95th
percentile (lake/rollups/1d, every day up to the report date) and when it reaches
`[rollups] forecast_threshold` of the interface's speed, with the 95 % prediction
interval's crossing days as its uncertainty. Ordinary least squares from statsmodels
(a straight line: planners read it as "growth per day"). Runs on DuckDB and statsmodels,
no Spark: the input is a few rows per interface and day."""
from __future__ import annotations

import datetime as dt
import math

import numpy as np

from flowlake.pipelines import duck
from flowlake.pipelines.interface_speeds import speed_of  # noqa: F401  (shared with the stream's volume detector)
from flowlake.schemas.rollups import CAPACITY_FORECAST

from .bulk_transfers import parse_speeds

NAME = "capacity_forecast"
TABLES = (CAPACITY_FORECAST,)


def crossing(days: np.ndarray, values: np.ndarray, limit: float) -> int | None:
    """First day (from `days`, ascending) whose value reaches `limit`."""
    hit = np.nonzero(values >= limit)[0]
    return int(days[hit[0]]) if len(hit) else None


def forecast(day_numbers: np.ndarray, p95: np.ndarray, speed_bps: float, threshold: float,
             min_days: int, horizon_days: int) -> dict:
    """One series: day_numbers (days since the epoch, ascending) and daily p95 in bit/s."""
    import statsmodels.api as sm  # noqa: PLC0415  (start-up: statsmodels)

    out = {"days": int(len(p95)), "p95_bps": float(p95[-1]), "speed_bps": float(speed_bps), "threshold": threshold,
           "trend_bps": None, "growth_bps_per_day": None, "growth_low": None, "growth_high": None,
           "crossing_date": None, "crossing_earliest": None, "crossing_latest": None}
    limit = threshold * speed_bps
    if len(p95) < max(3, min_days):
        return {**out, "status": "too few days"}
    x0 = day_numbers[0]
    X = sm.add_constant((day_numbers - x0).astype(float))
    fit = sm.OLS(p95.astype(float), X).fit()
    slope = float(fit.params[1])
    lo, hi = (float(v) for v in fit.conf_int(0.05)[1])
    last = int(day_numbers[-1])
    future = np.arange(last + 1, last + 1 + horizon_days)
    pred = fit.get_prediction(sm.add_constant((future - x0).astype(float), has_constant="add")).summary_frame(alpha=0.05)
    trend_now = float(fit.params[0] + slope * (last - x0))
    out.update(trend_bps=trend_now, growth_bps_per_day=slope, growth_low=lo, growth_high=hi)
    date = lambda d: None if d is None else (dt.date(1970, 1, 1) + dt.timedelta(days=d)).isoformat()  # noqa: E731
    out["crossing_earliest"] = date(crossing(future, pred["obs_ci_upper"].to_numpy(), limit))
    out["crossing_latest"] = date(crossing(future, pred["obs_ci_lower"].to_numpy(), limit))
    out["crossing_date"] = date(crossing(future, pred["mean"].to_numpy(), limit))
    if trend_now >= limit:
        status = "over threshold"
    elif slope <= 0 or not math.isfinite(slope):
        status = "no growth"
    else:
        status = "forecast"
    return {**out, "status": status}




def run(ctx) -> None:
    import pandas as pd  # noqa: PLC0415  (start-up: pandas)

    cfg = ctx.cfg
    r = cfg.rollups
    files = [f for f in duck.parquet_files(ctx.lake / "rollups" / "1d")
             if f.split("date=")[-1][:10] <= ctx.date.isoformat()]
    con = duck.connect(cfg)
    rows = []
    if files:
        series = con.execute(f"""SELECT exporter, if_index, side, CAST(date AS DATE) AS day, p95_bps
            FROM read_parquet({duck.sql_list(files)}, hive_partitioning = true)
            WHERE direction = 'all' ORDER BY exporter, if_index, side, day""").df()
        speeds = parse_speeds(cfg.active.interface_speeds)
        default = float(cfg.active.default_interface_speed_bps)
        for (exporter, if_index, side), g in series.groupby(["exporter", "if_index", "side"], sort=True):
            days = (pd.to_datetime(g["day"]) - pd.Timestamp("1970-01-01")).dt.days.to_numpy()
            res = forecast(days, g["p95_bps"].to_numpy(), speed_of(speeds, default, exporter, int(if_index)),
                           float(r.forecast_threshold), int(r.forecast_min_days), int(r.forecast_horizon_days))
            rows.append({"exporter": exporter, "if_index": int(if_index), "side": side,
                         "first_day": str(g["day"].iloc[0])[:10], **res})
    frame = pd.DataFrame(rows, columns=[f.name for f in CAPACITY_FORECAST.fields if f.name != "date"])
    con.register("capacity_forecast_rows", frame)
    ctx.write_duckdb(con, "SELECT * FROM capacity_forecast_rows", NAME)
