"""Judgements shared by the terminal summary, the report and `compare`: each cell's spread and
whether it is too noisy to trust, % of the case's ceiling, launch-bound verdicts, and whether a
change between two runs is outside the noise.

A change is real when a bootstrap interval of the ratio of medians, resampled from the stored
repetitions of both cells, excludes 1, and the change is larger than the cells' own spread (IQR /
median, the larger of the two).  The bootstrap alone grows very sure with a thousand repetitions:
it would call real a shift of a few percent that is only the host's load changing between two runs,
which moves a call by about its spread.  Rows stored without repetitions fall back to their
quantiles: the change is real when the two q20-q80 ranges do not overlap.  Below the threshold of
practical significance (`compare --min-change`) no change is real, however sure.

Two runs on one machine are compared through their reference workloads (measure/reference.py):
run B's times are divided by the ratio of the two runs' reference times, and each change's
interval widens by the range the references' samples allow (`Normalization`).  A run whose
references disagree between its start and its end, outside their noise and by more than the
threshold, saw the machine change speed while it measured: the comparison is not judged.
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
    min_change: float = 0.0  # a fraction: a smaller change is no change in practice

    @property
    def real(self) -> bool:
        outside = self.lo > 1.0 or self.hi < 1.0
        return (outside and abs(math.log(self.ratio)) > math.log1p(self.floor)
                and abs(self.ratio - 1.0) >= self.min_change)

    @property
    def regression_pct(self) -> float:
        return (self.ratio - 1.0) * 100.0

    def normalised(self, norm: "Normalization", min_change: float = 0.0) -> "Change":
        """The change with run B's times divided by the machine's speed ratio, its interval widened
        by the ratio's range; `min_change` (a fraction) set."""
        return Change(self.ratio / norm.factor, self.lo / norm.hi, self.hi / norm.lo, self.method, self.floor,
                      min_change)


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


def is_ceiling(impl: str) -> bool:
    """Whether `impl` is a ceiling (memcpy, torch-mm): a reference, not a competitor."""
    from fusebench.impls import get_impl

    try:
        return get_impl(impl).kind == "ceiling"
    except Exception:  # an implementation of a plugin not loaded here
        return impl in ("memcpy", "torch-mm")


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


# --------------------------------------------------------------------------------------------
# run-level noise: the reference workload


@dataclass(frozen=True)
class Normalization:
    """How run B's times are scaled before judging: divided by `factor` (B's reference over A's),
    known within [lo, hi].  `applied` False: factor 1, and `note` says why."""

    applied: bool
    factor: float = 1.0
    lo: float = 1.0
    hi: float = 1.0
    workloads: dict | None = None  # per workload, B's reference time over A's
    note: str = ""


NOT_NORMALISED = Normalization(False)


def drift(record: dict, min_change: float) -> str | None:
    """Why a run's reference record shows the machine changing speed during the run, or None.

    The machine changed speed when every reference workload's later sample differs from its first
    outside the noise, by more than `min_change` (a fraction) and in the same direction: a busy or
    throttled machine slows a copy and a GEMM alike, while one workload moving alone (a cold first
    copy) is that workload's noise, not the machine's."""
    from fusebench.measure.reference import WORKLOADS

    samples = record.get("samples") or []
    for later in samples[1:]:
        moved = []
        for w in WORKLOADS:
            c = change(samples[0].get(w), later.get(w)) if samples[0].get(w) and later.get(w) else None
            if c is None:
                break
            c = Change(c.ratio, c.lo, c.hi, c.method, c.floor, min_change)
            if not c.real:
                break
            moved.append((w, c.ratio))
        else:
            if moved and len({r > 1 for _, r in moved}) == 1:
                took = " and ".join(f"its {w} reference took {r:.2f}x" for w, r in moved)
                return (f"{took} as long at its {later.get('at', 'end')} ({later.get('time', '?')}) as at its "
                        f"{samples[0].get('at', 'start')} ({samples[0].get('time', '?')}), outside the noise")
    return None


def normalization(info_a: dict, info_b: dict, min_change: float, normalize: bool = True
                  ) -> tuple[Normalization, str | None, list[str]]:
    """(how to scale run B, why the runs cannot be judged or None, notes for the reader) from the
    two runs' rows (their `reference`, `device_name` and `timing` columns)."""
    from fusebench.measure.reference import load_record, speed, workload_ratios

    notes: list[str] = []
    records = {}
    for side, info in (("A", info_a), ("B", info_b)):
        record = load_record(info.get("reference"))
        if record is None:
            why = _not_available(info.get("reference"))
            notes.append(f"run {info.get('id')} ({side}) has no reference workload ({why}): "
                         f"its times are compared as measured")
        records[side] = record
    refused = None
    same = info_a.get("id") == info_b.get("id") and info_a.get("started") == info_b.get("started")
    for side, info in (("A", info_a), ("B", info_b)):
        record = records[side]
        if record is None or same:  # a run compared with itself changes nothing, drift or not
            continue
        if len(record["samples"]) < 2:
            notes.append(f"run {info.get('id')} ({side}) has only its start reference (an interrupted run): "
                         f"whether the machine's speed changed during it is not known")
            continue
        why = drift(record, min_change)
        if why and refused is None:
            refused = f"run {info.get('id')} ({side}): the machine's speed changed while it measured: {why}"
    if records["A"] is None or records["B"] is None:
        return NOT_NORMALISED, refused, notes
    if not normalize:
        notes.append("not normalised (--no-normalize): times compared as measured")
        return NOT_NORMALISED, refused, notes
    if str(info_a.get("device_name")) != str(info_b.get("device_name")) or \
            records["A"].get("device") != records["B"].get("device"):
        notes.append(f"the runs measured different devices ({info_a.get('device_name')} and "
                     f"{info_b.get('device_name')}): times compared as measured, not normalised")
        return NOT_NORMALISED, refused, notes
    if records["A"].get("threads") != records["B"].get("threads"):
        notes.append(f"the runs used different thread counts ({records['A'].get('threads')} and "
                     f"{records['B'].get('threads')}): times compared as measured, not normalised")
        return NOT_NORMALISED, refused, notes
    ranges = workload_ranges(records["A"], records["B"])
    lo, hi = min(r[0] for r in ranges.values()), max(r[1] for r in ranges.values())
    workloads = workload_ratios(records["A"], records["B"])
    parts = ", ".join(f"{w} {r:.3f}x" for w, r in workloads.items())
    if max(r[0] for r in ranges.values()) <= min(r[1] for r in ranges.values()):  # the workloads agree
        factor = speed(records["B"]).index / speed(records["A"]).index
        how = f"B's times are divided by {factor:.3f}"
    else:  # which of them a cell resembles is not known: no more normalisation than the range requires
        factor = min(max(1.0, lo), hi)
        how = (f"the workloads disagree, so B's times are divided by {factor:.3f}, the least the references "
               f"require")
    note = (f"run {info_b.get('id')}'s reference workload took {parts} as long as run {info_a.get('id')}'s: "
            f"{how}, the ratio known within {lo:.3f}-{hi:.3f}")
    if hi / lo > 1.0 + min_change:
        notes.append(f"the machine's speed ratio between the runs is known only within {lo:.3f}-{hi:.3f} (the "
                     f"reference workloads' noise and disagreement): changes smaller than that are not told from it")
    return Normalization(True, factor, lo, hi, workloads, note), refused, notes


def workload_ranges(record_a: dict, record_b: dict) -> dict[str, tuple[float, float]]:
    """Per workload, the range of B's reference time over A's that the references allow: over every
    pair of samples, the bootstrap interval of the ratio of their medians (quantile ranges where
    repetitions were not kept).  Workloads whose ranges do not overlap disagree (a copy slowed, a
    GEMM not): then which of them a cell resembles is not known, and the whole span is the range."""
    from fusebench.measure.reference import WORKLOADS

    out = {}
    for w in WORKLOADS:
        lows, highs = [], []
        for sa in record_a["samples"]:
            for sb in record_b["samples"]:
                c = change(sa[w], sb[w])
                if c is not None:
                    lows.append(min(c.lo, c.ratio))
                    highs.append(max(c.hi, c.ratio))
        if lows:
            out[w] = (min(lows), max(highs))
    return out or {"": (1.0, 1.0)}


def _not_available(text) -> str:
    try:
        record = json.loads(text) if isinstance(text, str) and text else None
    except ValueError:
        record = None
    if isinstance(record, dict) and record.get("not_available"):
        return str(record["not_available"])
    return "stored without one" if not text else "unreadable"


# --------------------------------------------------------------------------------------------
# impossible values

# A ceiling is a same-run PyTorch operation, not a law of physics: an implementation can beat it by
# a little (a better GEMM than cuBLAS picked, a copy faster than copy_).  Beyond this margin plus
# the two cells' spreads a fraction of the ceiling is a disturbed measurement, not a result.
CEILING_MARGIN = 0.10


def beyond_ceiling(pct: float | None, spread: float | None = None, ceiling_spread: float | None = None) -> bool:
    """Whether a % of the ceiling exceeds 100% by more than CEILING_MARGIN and the noise."""
    if pct is None or not math.isfinite(pct):
        return False
    return pct > 100.0 * (1.0 + CEILING_MARGIN + (spread or 0.0) + (ceiling_spread or 0.0))


def add_beyond_ceiling(rows: pd.DataFrame, ceiling: str | None) -> pd.Series:
    """Per row, whether its % of the case's ceiling (same run, dtype and shape) is beyond what a
    ceiling allows (beyond_ceiling), given both cells' spreads."""
    if ceiling is None or "time_us" not in rows or not (rows["impl"] == ceiling).any():
        return pd.Series(False, index=rows.index)
    ok = rows[(rows["impl"] == ceiling) & (rows["status"] == "ok")]
    ref = {(d, s): r for d, s, r in zip(ok["dtype"], ok["shape"], ok.to_dict("records"))}
    out = []
    for r in rows.to_dict("records"):
        c = ref.get((r["dtype"], r["shape"]))
        out.append(bool(c is not None and r["status"] == "ok" and r["impl"] != ceiling and beyond_ceiling(
            ceiling_pct(r.get("time_us"), c.get("time_us")), cell_spread(r), cell_spread(c))))
    return pd.Series(out, index=rows.index, dtype=bool)
