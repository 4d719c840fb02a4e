"""Session 19, call 1: cooperative rows whose last round is cut finer (utils.coop_tail) against
the same plans with the last round laid out as the others, and against the previous commit's
kernels (imported as `fusebench_old` from .ab/), at long rows, fp32.

For each case and shape, timed rep by rep in turn (measure.timing.time_interleaved, L2 flushed):
a copy of as many bytes as the case moves, the plan the autotuner keeps now (all candidates), and
every cooperative plan without a prefetch: "tail" (this commit), "even" (this commit, fine_tail
off), "old" (previous commit).  Layernorm's plans that hold weight and bias also run with them
re-read ("tail, wb re-read"), as the fine tail costs the held ones registers.  Each output is
checked against the case's float64 reference first.  Prints one table per case and shape; writes
JSON lines.

    PYTHONPATH=.:.ab python docs/device-runs/s19-call1-probe.py OUT.jsonl [case ...]
    (PROBE_SHAPES=512x65536,... to choose shapes)
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

import torch

import fusebench_old.kernels.norms as old_norms
import fusebench_old.kernels.softmax as old_sm
from fusebench.cases import get_case
from fusebench.kernels import norms, softmax as sm, utils
from fusebench.measure.timing import TimingSettings, time_interleaved

NEW = {"softmax": (sm.softmax_impl, sm.softmax_plans), "double_softmax": (sm.double_softmax_impl, sm.double_softmax_plans),
       "softmax_backward": (sm.softmax_backward_impl, sm.softmax_backward_plans),
       "layernorm": (norms.layernorm_impl, norms.layernorm_plans), "norm_chain": (norms.norm_chain_impl, norms.norm_chain_plans)}
OLD = {"softmax": (old_sm.softmax_impl, old_sm.softmax_plans),
       "double_softmax": (old_sm.double_softmax_impl, old_sm.double_softmax_plans),
       "softmax_backward": (old_sm.softmax_backward_impl, old_sm.softmax_backward_plans),
       "layernorm": (old_norms.layernorm_impl, old_norms.layernorm_plans),
       "norm_chain": (old_norms.norm_chain_impl, old_norms.norm_chain_plans)}
SHAPES = [(512, 65536), (1024, 65536), (2048, 65536), (1024, 32768)]
DEV = "cuda:0"
if os.environ.get("PROBE_SHAPES"):
    SHAPES = [tuple(map(int, s.split("x"))) for s in os.environ["PROBE_SHAPES"].split(",")]
HOLDS = norms.layernorm_holds_wb


def wb_reread(fn):
    """fn run with layernorm's weight and bias re-read every round (norms.layernorm_holds_wb off)."""
    def run():
        norms.layernorm_holds_wb = lambda *a: False
        try:
            return fn()
        finally:
            norms.layernorm_holds_wb = HOLDS
    return run


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
                if p.mode == "coop" and not p.prefetch:
                    tail = utils.coop_tail(p, M, N)
                    calls[f"tail {tail[0]}x{tail[1]}: {p.describe()}"] = (lambda p=p: new_impl(*args, plan=p))
                    if name == "layernorm" and utils.coop_tail(p, M, N)[0] != p.splits:
                        calls[f"tail, wb re-read: {p.describe()}"] = wb_reread(lambda p=p: new_impl(*args, plan=p))
                    even = dataclasses.replace(p, fine_tail=False)
                    calls[f"even: {even.describe()}"] = (lambda p=even: new_impl(*args, plan=p))
            old_impl, old_plans = OLD[name]
            for p in old_plans(M, N, DEV):
                if p.mode == "coop" and not p.prefetch:
                    calls[f"old: {p.describe()}"] = (lambda p=p, f=old_impl: f(*args, plan=p))
            fns, labels, notes = [], [], {}
            for label, fn in calls.items():
                try:
                    res = fn()
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
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
