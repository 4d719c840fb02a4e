"""Judgements shared by the terminal summary, the report and `compare`: each cell's spread and
whether it is too noisy to trust, % of the case's ceiling, launch-bound verdicts, and whether a
change between two runs is outside the noise.

A change is real when a bootstrap interval of the ratio of medians, resampled from the stored
repetitions of both cells, excludes 1, and the change is larger than the cells' own spread (IQR /
median, the larger of the two).  The bootstrap alone grows very sure with a thousand repetitions:
it would call real a shift of a few percent that is only the host's load changing between two runs,
which moves a call by about its spread.  Rows stored without repetitions fall back to their
quantiles: the change is real when the two q20-q80 ranges do not overlap.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fusebench.measure.timing import NOISY_SPREAD

BOOTSTRAP_ROUNDS = 1000
BOOTSTRAP_LEVEL = 0.95  # two-sided: the 2.5th and 97.5th percentiles of the resampled ratios
MAX_BOOTSTRAP_SAMPLES = 400  # per side; a longer series is subsampled evenly (each sample is a call)


def _value(row, key):
    v = row.get(key) if isinstance(row, dict) else getattr(row, key, None)
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def cell_spread(row) -> float | None:
    """IQR / median of a cell's repetitions; for rows stored without it, (q80 - q20) / median."""
    s = _value(row, "time_spread")
    if s is not None:
        return float(s)
    t, q20, q80 = _value(row, "time_us"), _value(row, "time_q20_us"), _value(row, "time_q80_us")
    if t and q20 is not None and q80 is not None:
        return float((q80 - q20) / t)
    return None


def is_noisy(spread: float | None) -> bool:
    return spread is not None and spread > NOISY_SPREAD


def samples(row) -> np.ndarray | None:
    text = _value(row, "time_samples_us")
    if not isinstance(text, str) or not text:
        return None
    try:
        values = np.asarray(json.loads(text), dtype=float)
    except (ValueError, TypeError):
        return None
    values = values[np.isfinite(values) & (values > 0)]
    return values if values.size >= 3 else None


@dataclass(frozen=True)
class Change:
    """time(B) / time(A) of one cell, with the interval the noise allows and whether it is real."""

    ratio: float
    lo: float
    hi: float
    method: str  # "bootstrap" | "quantiles"
    floor: float = 0.0  # the cells' spread: a smaller change is within what the host's load moves

    @property
    def real(self) -> bool:
        outside = self.lo > 1.0 or self.hi < 1.0
        return outside and abs(math.log(self.ratio)) > math.log1p(self.floor)

    @property
    def regression_pct(self) -> float:
        return (self.ratio - 1.0) * 100.0


def _thin(x: np.ndarray) -> np.ndarray:
    if x.size <= MAX_BOOTSTRAP_SAMPLES:
        return x
    return x[np.linspace(0, x.size - 1, MAX_BOOTSTRAP_SAMPLES).round().astype(int)]


def bootstrap_ratio(a: np.ndarray, b: np.ndarray, rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of median(b) / median(a), resampling each side with replacement."""
    rng = np.random.default_rng(seed)
    a, b = _thin(a), _thin(b)
    ma = np.median(rng.choice(a, size=(rounds, a.size)), axis=1)
    mb = np.median(rng.choice(b, size=(rounds, b.size)), axis=1)
    tail = (1 - BOOTSTRAP_LEVEL) / 2 * 100
    lo, hi = np.percentile(mb / ma, [tail, 100 - tail])
    return float(lo), float(hi)


def change(row_a, row_b) -> Change | None:
    """The change of one cell from run A to run B; None where either has no time."""
    ta, tb = _value(row_a, "time_us"), _value(row_b, "time_us")
    if not ta or not tb:
        return None
    ratio = tb / ta
    sa, sb = samples(row_a), samples(row_b)
    if sa is not None and sb is not None:
        lo, hi = bootstrap_ratio(sa, sb)
        floor = max(cell_spread(row_a) or 0.0, cell_spread(row_b) or 0.0)
        return Change(ratio, min(lo, ratio), max(hi, ratio), "bootstrap", floor)
    qa = (_value(row_a, "time_q20_us") or ta, _value(row_a, "time_q80_us") or ta)
    qb = (_value(row_b, "time_q20_us") or tb, _value(row_b, "time_q80_us") or tb)
    # The ranges overlap: no change the stored quantiles can tell from noise; the interval spans 1.
    if qb[0] <= qa[1] and qa[0] <= qb[1]:
        return Change(ratio, min(ratio, 1.0), max(ratio, 1.0), "quantiles")
    return Change(ratio, ratio, ratio, "quantiles")


def ceiling_pct(time_us, ceiling_time_us) -> float | None:
    """% of the ceiling: time(ceiling) / time(impl) x 100 (the same bytes or FLOPs moved, so it is
    the GB/s or TFLOP/s over the ceiling's)."""
    if not time_us or not ceiling_time_us or pd.isna(time_us) or pd.isna(ceiling_time_us):
        return None
    return 100.0 * ceiling_time_us / time_us


def launch_bound(row, base) -> bool:
    """Faster than the baseline on the device but slower from Python: host launch cost (wrappers,
    guards) turns the verdict.  Only on a GPU (on the CPU both times are host times, and their
    difference is noise) and where both have a wall time."""
    if not str(_value(row, "device") or "cuda").startswith("cuda"):
        return False
    t, bt = _value(row, "time_us"), _value(base, "time_us")
    w, bw = _value(row, "wall_time_us"), _value(base, "wall_time_us")
    if not (t and bt and w and bw):
        return False
    return t < bt and w > bw


def add_ceiling_pct(rows: pd.DataFrame, ceiling: str | None) -> pd.Series:
    """Per row, % of the case's ceiling timed in the same run at the same (dtype, shape)."""
    if ceiling is None or "time_us" not in rows or not (rows["impl"] == ceiling).any():
        return pd.Series(np.nan, index=rows.index)
    ok = rows[(rows["impl"] == ceiling) & (rows["status"] == "ok")]
    ref = dict(zip(zip(ok["dtype"], ok["shape"]), ok["time_us"]))
    values = [ceiling_pct(t, ref.get((d, s))) if st == "ok" and impl != ceiling else None
              for t, d, s, st, impl in zip(rows["time_us"], rows["dtype"], rows["shape"], rows["status"], rows["impl"])]
    return pd.Series([np.nan if v is None else v for v in values], index=rows.index, dtype=float)
