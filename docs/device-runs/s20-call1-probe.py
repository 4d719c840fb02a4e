"""Session 20, call 1: the horizontal cases' split rows with tagged partials and no fence (this
commit) against the release-acquire counter they replace (the previous commit's kernels, imported
as `fusebench_old` from .ab/), fp32.

For each case and shape, timed rep by rep in turn (measure.timing.time_interleaved, L2 flushed):
a copy of as many bytes as the case moves, the plan the autotuner keeps now and before (each
autotuned among all its candidates), every split plan now and before.  Each output is checked
against the case's float64 reference first.  Prints one table per case and shape; writes JSON
lines.

    PYTHONPATH=.:.ab python docs/device-runs/s20-call1-probe.py OUT.jsonl [case ...]
    (PROBE_SHAPES=512x65536,... to choose shapes; PROBE_SMOKE=1 for a dry run on the CPU)
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch

from fusebench.cases import get_case
from fusebench.kernels import horizontal as hor, utils
from fusebench.measure.timing import TimingSettings, time_interleaved

SHAPES = [(512, 65536), (1024, 32768), (2048, 16384), (1024, 65536), (4096, 8192), (8192, 8192), (128, 65536)]
DEV = "cuda:0"
if os.environ.get("PROBE_SHAPES"):
    SHAPES = [tuple(map(int, s.split("x"))) for s in os.environ["PROBE_SHAPES"].split(",")]
if os.environ.get("PROBE_SMOKE"):
    SHAPES, DEV = [(4, 9000)], "cpu"

import fusebench_old.kernels.horizontal as old_hor  # noqa: E402
import fusebench_old.kernels.utils as old_utils  # noqa: E402

IMPLS = {"horizontal_reduction_pointwise": (hor.horizontal_reduction_pointwise_impl,
                                            old_hor.horizontal_reduction_pointwise_impl),
         "horizontal_reduction_reduction": (hor.horizontal_reduction_reduction_impl,
                                            old_hor.horizontal_reduction_reduction_impl)}


def within_tolerance(case, outs, args):
    refs = case.run_reference(args)
    atol, rtol = case.tolerance(args[0].dtype)
    worst, ok = 0.0, True
    for out, ref in zip(outs, refs):
        err = (out.double() - ref).abs()
        ok &= bool((err <= atol * ref.abs().max() + rtol * ref.abs()).all()) and bool(torch.isfinite(out).all())
        worst = max(worst, float(err.max()))
    return ok, worst


def main() -> None:
    out_path = sys.argv[1]
    names = sys.argv[2:] or list(IMPLS)
    for name in names:
        case = get_case(name)
        with_cos = name.endswith("pointwise")
        new_impl, old_impl = IMPLS[name]
        for M, N in SHAPES:
            t0 = time.time()
            (a,) = case.make_inputs((M, N), torch.float32, DEV, 0)
            moved = a.numel() * 4 * (2 if with_cos else 1) + M * 4 * (1 if with_cos else 2)
            src = torch.empty(moved // 8, dtype=torch.float32, device=DEV)
            dst = torch.empty_like(src)
            utils.forget_choice()
            new_impl(a)
            kept = utils.last_choice()
            old_utils.forget_choice()
            old_impl(a)
            old_kept = old_utils.last_choice()
            calls = {"copy": lambda: dst.copy_(src),
                     f"new kept: {kept.describe()}": lambda: new_impl(a, plan=kept),
                     f"old kept: {old_kept.describe()}": lambda: old_impl(a, plan=old_kept)}
            for p in hor.horizontal_plans(M, N, DEV, with_cos=with_cos):
                if p.mode == "split":
                    calls[f"new {p.describe()}"] = (lambda p=p: new_impl(a, plan=p))
            for p in old_hor.horizontal_plans(M, N, DEV, with_cos=with_cos):
                if p.mode == "split":
                    calls[f"old {p.describe()}"] = (lambda p=p: old_impl(a, plan=p))
            fns, labels, notes = [], [], {}
            for label, fn in calls.items():
                try:
                    res = fn()
                    if DEV != "cpu":
                        torch.cuda.synchronize()
                except Exception as exc:  # noqa: BLE001
                    notes[label] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                    continue
                if label != "copy":
                    ok, err = within_tolerance(case, res, (a,))
                    notes[label] = f"{'ok' if ok else 'WRONG'} (max err {err:.2e})"
                    if not ok:
                        continue
                fns.append(fn)
                labels.append(label)
            samples = time_interleaved(fns, DEV, TimingSettings(), 20)
            med = {lab: sorted(s)[len(s) // 2] for lab, s in zip(labels, samples)}
            copy = med["copy"]
            print(f"\n== {name} {M}x{N}  ({moved / 2**20:.0f} MiB moved; copy {copy:.1f} us = "
                  f"{moved / copy / 1e3:.0f} GB/s; {time.time() - t0:.0f} s)", flush=True)
            for lab in calls:
                if lab in med:
                    print(f"  {med[lab]:9.1f} us  {copy / med[lab]:5.3f} of copy  {moved / med[lab] / 1e3:5.0f} GB/s  "
                          f"{lab}  {notes.get(lab, '')}")
                else:
                    print(f"  {'':9s}     {'':5s}          {lab}  {notes.get(lab, '')}")
            with open(out_path, "a") as f:
                f.write(json.dumps({"case": name, "shape": f"{M}x{N}", "moved": moved, "median_us": med,
                                    "notes": notes}) + "\n")
            del a, src, dst
            if DEV != "cpu":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
