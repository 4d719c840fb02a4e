#!/usr/bin/env python
"""Two implementations of a case timed rep by rep in turn, to decide small differences.

    python bench/paired.py CASE SHAPES [--impls triton,inductor] [--rounds 300] [--dtype fp32]
                           [--csv FILE]

Separate timings of a 5 us call after an L2 flush differ by up to ~0.7 us from one timing to the
next (session 12), so "our kernel is below 0.95x Inductor" cannot be read off one grid cell there.
Here each round times both implementations once, in an order that reverses every round, each rep
as the cells are timed (flush, warm call, spin, CUDA events: measure.timing.time_interleaved);
what drifts during the run falls on both alike.  Before timing, each implementation's output is
checked against the float64 reference (one seed; not that of a ceiling such as memcpy, which
computes part of the case on purpose); a wrong one is reported and not timed.

Per shape it prints both medians, what each implementation's first call chose (our kernels: the
autotuned launch plan, which can differ from one process to the next), the speedup of the first
implementation over the second (the second's median over the first's), a 95% bootstrap interval
of that speedup (resampling rounds), and a verdict against --threshold (default 0.95): "below"
when the whole interval is under it, "not below" when the whole interval is at or above it,
"undecided" otherwise.  CUDA only for meaningful numbers; on the CPU it runs the same steps with
host timings (for tests).
"""
from __future__ import annotations

import argparse
import csv
import functools
import os
import sys

import numpy as np
import torch

from fusebench.cases.base import DTYPES, get_case, parse_shape
from fusebench.impls.base import get_impl
from fusebench.measure.accuracy import compare
from fusebench.measure.timing import TimingSettings, time_interleaved
from fusebench.runner.cell import SEEDS, _warm_call


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


def measure(case_name: str, shape, impl_names, dtype_name: str, device: str, rounds: int,
            threshold: float) -> dict:
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
        warm = _warm_call(case, prepared, args, shape, dtype, device, settings, case.min_bytes(shape, dtype))
        warms.append(None if warm is None else functools.partial(_in_context, prepared, warm))
    del ref
    with torch.no_grad():
        a_us, b_us = time_interleaved(fns, device, settings, rounds, warms)
    speedup, lo, hi = speedup_interval(a_us, b_us)
    row.update(a_us=round(float(np.median(a_us)), 3), b_us=round(float(np.median(b_us)), 3),
               speedup=round(speedup, 4), lo=round(lo, 4), hi=round(hi, 4), rounds=rounds,
               verdict=verdict(lo, hi, threshold))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case")
    ap.add_argument("shapes", help="AxB[,CxD,...]")
    ap.add_argument("--impls", default="triton,inductor", help="two implementations: A,B (speedup of A over B)")
    ap.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--threshold", type=float, default=0.95)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--csv", help="append the rows to this CSV file")
    a = ap.parse_args(argv)
    impls = a.impls.split(",")
    try:
        get_case(a.case)
        if len(impls) != 2:
            raise ValueError(f"--impls takes two implementations, got {a.impls!r}")
        for name in impls:
            get_impl(name)
        shapes = [parse_shape(s, 2) for s in a.shapes.split(",")]
    except (LookupError, ValueError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    rows = []
    for shape in shapes:
        row = measure(a.case, shape, impls, a.dtype, a.device, a.rounds, a.threshold)
        rows.append(row)
        if "speedup" in row:
            print(f"{a.case} {row['shape']:>11s} {impls[0]} {row['a_us']:9.3f} us  {impls[1]} {row['b_us']:9.3f} us  "
                  f"{impls[0]} {row['speedup']:.3f}x [{row['lo']:.3f}, {row['hi']:.3f}]  {row['verdict']}"
                  + "".join(f"\n    {name}: {row[k]}" for name, k in zip(impls, ("a_plan", "b_plan")) if row.get(k)),
                  flush=True)
        else:
            print(f"{a.case} {row['shape']:>11s} {row['verdict']}", flush=True)
    if a.csv:
        fields = ["case", "shape", "dtype", "a", "b", "a_us", "b_us", "speedup", "lo", "hi", "rounds", "verdict",
                  "a_plan", "b_plan"]
        new = not os.path.exists(a.csv)
        with open(a.csv, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            if new:
                w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
