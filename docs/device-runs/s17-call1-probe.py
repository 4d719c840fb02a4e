"""Session 17, call 1: cooperative rows with tagged partials (this commit) against the per-row
barrier they replace (the previous commit's kernels, imported as `fusebench_old` from .ab/), at
long rows, fp32.

For each case and shape, timed rep by rep in turn (measure.timing.time_interleaved, L2 flushed):
a copy of as many bytes as the case moves, the plan the autotuner keeps now (all candidates), every
cooperative plan now and before.  Each plan's output is checked against the case's float64
reference first.  Prints one table per case and shape; writes JSON lines.

    PYTHONPATH=.:.ab python docs/device-runs/s17-call1-probe.py OUT.jsonl [case ...]
    (PROBE_SHAPES=512x65536,... to choose shapes; PROBE_OLD=0 to leave out the previous commit's plans)
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch

from fusebench.cases import get_case
from fusebench.kernels import norms, softmax as sm, utils
from fusebench.measure.timing import TimingSettings, time_interleaved
NEW = {"softmax": (sm.softmax_impl, sm.softmax_plans), "double_softmax": (sm.double_softmax_impl, sm.double_softmax_plans),
       "softmax_backward": (sm.softmax_backward_impl, sm.softmax_backward_plans),
       "layernorm": (norms.layernorm_impl, norms.layernorm_plans), "norm_chain": (norms.norm_chain_impl, norms.norm_chain_plans)}
SHAPES = [(512, 65536), (2048, 65536), (8192, 65536), (1024, 32768)]
DEV = "cuda:0"
if os.environ.get("PROBE_SHAPES"):  # e.g. 512x65536,1024x65536
    SHAPES = [tuple(map(int, s.split("x"))) for s in os.environ["PROBE_SHAPES"].split(",")]
if os.environ.get("PROBE_SMOKE"):  # a dry run on the CPU (no cooperative plans there)
    SHAPES, DEV = [(4, 300)], "cpu"
OLD_TOO = os.environ.get("PROBE_OLD", "1") != "0"  # PROBE_OLD=0: this commit's plans only (no .ab/ needed)
OLD = {}
if OLD_TOO:
    import fusebench_old.kernels.norms as old_norms
    import fusebench_old.kernels.softmax as old_sm

    OLD = {"softmax": (old_sm.softmax_impl, old_sm.softmax_plans),
           "double_softmax": (old_sm.double_softmax_impl, old_sm.double_softmax_plans),
           "softmax_backward": (old_sm.softmax_backward_impl, old_sm.softmax_backward_plans),
           "layernorm": (old_norms.layernorm_impl, old_norms.layernorm_plans),
           "norm_chain": (old_norms.norm_chain_impl, old_norms.norm_chain_plans)}


def max_rel_err(case, out, args):
    ref = case.run_reference(args)
    atol, rtol = case.tolerance(args[0].dtype)
    err = (out.double() - ref).abs()
    ok = bool((err <= atol * ref.abs().max() + rtol * ref.abs()).all()) and bool(torch.isfinite(out).all())
    return ok, float(err.max())


def main() -> None:
    out_path = sys.argv[1]
    names = sys.argv[2:] or list(NEW)
    for name in names:
        case = get_case(name)
        for M, N in SHAPES:
            t0 = time.time()
            args = case.make_inputs((M, N), torch.float32, DEV, 0)
            moved = sum(a.numel() * a.element_size() for a in args if a.dim() == 2) + M * N * 4
            src = torch.empty(moved // 8, dtype=torch.float32, device=DEV)
            dst = torch.empty_like(src)
            new_impl, new_plans = NEW[name]
            utils.forget_choice()
            new_impl(*args)  # autotunes among every candidate
            kept = utils.last_choice()
            calls = {"copy": lambda: dst.copy_(src), f"kept: {kept.describe()}": lambda: new_impl(*args, plan=kept)}
            for p in new_plans(M, N, DEV):
                if p.mode == "coop":
                    calls[f"new {p.describe()}"] = (lambda p=p: new_impl(*args, plan=p))
            if OLD_TOO:
                old_impl, old_plans = OLD[name]
                for p in old_plans(M, N, DEV):
                    if p.mode == "coop":
                        calls[f"old {p.describe()}"] = (lambda p=p, f=old_impl: f(*args, plan=p))
            fns, labels, notes = [], [], {}
            for label, fn in calls.items():
                try:
                    res = fn()
                    if DEV != "cpu":
                        torch.cuda.synchronize()
                except Exception as exc:  # noqa: BLE001 - e.g. a cooperative grid that does not fit
                    notes[label] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                    continue
                if label != "copy":
                    ok, err = max_rel_err(case, res, args)
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
                    print(f"  {med[lab]:9.1f} us  {copy / med[lab]:5.3f} of copy  {lab}  {notes.get(lab, '')}")
                else:
                    print(f"  {'':9s}     {'':5s}          {lab}  {notes.get(lab, '')}")
            with open(out_path, "a") as f:
                f.write(json.dumps({"case": name, "shape": f"{M}x{N}", "moved": moved, "median_us": med,
                                    "notes": notes}) + "\n")
            del args, src, dst
            if DEV != "cpu":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
