"""Two implementations of a case timed rep by rep in turn, to decide small differences.

Separately timed medians of a 5 us call after an L2 flush differ by up to ~0.7 us from one timing
to the next, so "A is below 0.95x B" cannot be read off two grid cells there.  Here each round
times both implementations once, in an order that reverses every round, each rep as a cell is
timed (flush, warm call, spin, CUDA events: measure.timing.time_interleaved); whatever drifts
during the run falls on both alike.  Before timing, each implementation's output is checked
against the float64 reference (one seed; not that of a ceiling such as memcpy, which computes part
of the case on purpose); a wrong one is reported and not timed.

The speedup of A over B is B's median over A's, with a 95% bootstrap interval that resamples whole
rounds; the verdict against a threshold is "below" when the whole interval is under it, "not
below" when the whole interval is at or above it, "undecided" otherwise.  On the CPU the same steps
run with host timings.
"""
from __future__ import annotations

import csv
import functools
import os
from typing import Sequence

import numpy as np
import torch

from fusebench.cases.base import DTYPES, get_case
from fusebench.impls.base import get_impl
from fusebench.measure.accuracy import compare
from fusebench.measure.timing import TimingSettings, time_interleaved, warm_call_for
from fusebench.runner.cell import SEEDS

CSV_FIELDS = ("case", "shape", "dtype", "a", "b", "a_us", "b_us", "speedup", "lo", "hi", "rounds", "verdict",
              "a_plan", "b_plan")


def speedup_interval(a_us, b_us, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """median(b) / median(a) and its 95% bootstrap interval, resampling whole rounds (a[i] and
    b[i] were timed in the same round)."""
    a, b = np.asarray(a_us, dtype=float), np.asarray(b_us, dtype=float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(n_boot, len(a)))
    boot = np.median(b[idx], axis=1) / np.median(a[idx], axis=1)
    return float(np.median(b) / np.median(a)), float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))


def verdict(lo: float, hi: float, threshold: float) -> str:
    if hi < threshold:
        return "below"
    if lo >= threshold:
        return "not below"
    return "undecided"


def _in_context(prepared, fn, *args):
    with prepared.context():  # host side: outside the GPU time (measure.timing's spin)
        return fn(*args)


def measure(case_name: str, shape, impl_names: Sequence[str], dtype_name: str, device: str, rounds: int,
            threshold: float = 0.95) -> dict:
    """One shape: a row of CSV_FIELDS, or a row whose `verdict` says why nothing was timed."""
    case = get_case(case_name)
    dtype = DTYPES[dtype_name]
    row = dict(case=case_name, shape="x".join(map(str, shape)), dtype=dtype_name, a=impl_names[0], b=impl_names[1])
    args = case.make_inputs(shape, dtype, device, SEEDS[0])
    ref = case.run_reference(args)
    settings = TimingSettings()
    fns, warms = [], []
    for name in impl_names:
        why = get_impl(name).supports(case, shape, dtype, device)
        if why:
            row["verdict"] = f"{name} not available: {why}"
            return row
        prepared = get_impl(name).prepare(case, shape, dtype, device)
        with prepared.context(), torch.no_grad():
            out = prepared.fn(*args)
            # a ceiling (memcpy, torch-mm) computes part of the case on purpose: not compared
            acc = None if prepared.accuracy_available else compare(out, ref, *case.tolerance(dtype))
        if acc is not None and not acc.passed:
            row["verdict"] = f"{name} wrong: {acc.tol_ratio:.3g}x the tolerance"
            return row
        # what its first call chose (our kernels: the autotuned plan), so that runs can be compared
        row[f"{'ab'[len(fns)]}_plan"] = prepared.note_after() or prepared.note or ""
        fns.append(functools.partial(_in_context, prepared, prepared.fn, *args))
        # the runner's warm call (on a GPU, up to warm_call_max_bytes of traffic; else None)
        warm = warm_call_for(prepared.fn, lambda seed: case.make_inputs(shape, dtype, device, seed), args, device,
                             settings, case.min_bytes(shape, dtype))
        warms.append(None if warm is None else functools.partial(_in_context, prepared, warm))
    del ref
    with torch.no_grad():
        a_us, b_us = time_interleaved(fns, device, settings, rounds, warms)
    speedup, lo, hi = speedup_interval(a_us, b_us)
    row.update(a_us=round(float(np.median(a_us)), 3), b_us=round(float(np.median(b_us)), 3),
               speedup=round(speedup, 4), lo=round(lo, 4), hi=round(hi, 4), rounds=rounds,
               verdict=verdict(lo, hi, threshold))
    return row


VERDICT_TEXT = {"below": "below the threshold", "not below": "not below the threshold",
                "undecided": "undecided (the interval spans the threshold)"}


def format_row(row: dict) -> str:
    """One shape's result as the terminal shows it, every number labelled (the plans on their own
    lines)."""
    a, b = row["a"], row["b"]
    if "speedup" not in row:
        return f"{row['case']} {row['shape']} {row['dtype']}: {row['verdict']}"
    text = (f"{row['case']} {row['shape']} {row['dtype']}: median {a} {row['a_us']:.3f} us, {b} {row['b_us']:.3f} us "
            f"over {row['rounds']} rounds; speedup of {a} over {b} {row['speedup']:.3f}x, 95% interval "
            f"[{row['lo']:.3f}, {row['hi']:.3f}]; verdict: {VERDICT_TEXT.get(row['verdict'], row['verdict'])}")
    return text + "".join(f"\n    {name}: {row[k]}" for name, k in ((a, "a_plan"), (b, "b_plan")) if row.get(k))


def append_csv(rows: Sequence[dict], path: str) -> None:
    """Append rows to a CSV file, with a header when the file is new."""
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        if new:
            w.writeheader()
        w.writerows(rows)
