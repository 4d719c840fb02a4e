#!/usr/bin/env python
"""Every launch plan of the two-pass row kernels at long rows: correct?, how fast?, how many DRAM bytes?

    PYTHONPATH=. python bench/long_rows.py [--cases softmax,norm_chain] [--shapes 1024x65536,8192x65536]
                                           [--modes loop,split,coop] [--plans SPECS] [--ncu] [--out DIR]

For each case and shape (fp32): the inputs (the case's make_inputs), the float64 reference, then
for every candidate plan of the wrapper's list (softmax_plans, layernorm_plans, ...; the list the
autotuner times), in order:

1. correctness: the plan's output against the reference with the case's tolerance (KernelBench
   style: a wrong plan is reported as such and not timed);
2. time: fusebench's cell timing (measure.timing: L2 flushed clean before every
   call, host launch cost kept out), median over about 50 ms of calls;
3. GB/s = the case's minimum bytes / time, and that over the copy rate: `dst.copy_(src)` of the
   same number of bytes timed the same way in the same process ("copy"), and over the copy of
   1 GiB per buffer ("peak");
4. with --ncu: each plan run once more under Nsight Compute (a child process, all plans of a
   (case, shape) in one; --cache-control none and our own flush before each plan, as
   metrics/ncu.py): DRAM bytes read and written over the case's minimum ("read x", "write x":
   how many times the input was read from DRAM, the output written).  --ncu-extra M1,M2,...
   adds those Nsight Compute metrics (e.g. lts__t_sectors.avg.pct_of_peak_sustained_elapsed, L2
   throughput), each taken from the plan's longest kernel, as columns named after them.

Writes DIR/long_rows.csv (DIR: --out, else $OUT, else the working directory) and prints a table
per case.  LONG_ROWS_TIME_WRONG=1 times (and counts the bytes of) wrong plans too, for diagnostic
variants of a kernel that leave out part of its work.  GPU only (for a dry run of the code on the CPU, under TRITON_INTERPRET=1:
LONG_ROWS_DEVICE=cpu with small shapes, --max-onchip 64 and --modes loop,split).
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time

import torch

from fusebench.cases import get_case
from fusebench.kernels import norms, softmax, utils
from fusebench.measure.accuracy import compare
from fusebench.measure.timing import _flush_buffer, _flush_l2
from fusebench.metrics.ncu import find_ncu, ncu_command, ncu_failure, parse_ncu_csv

# case -> (wrapper with a `plan` argument, the wrapper's candidate list)
CASES = {
    "softmax": (softmax.softmax_impl, softmax.softmax_plans),
    "double_softmax": (softmax.double_softmax_impl, softmax.double_softmax_plans),
    "softmax_backward": (softmax.softmax_backward_impl, softmax.softmax_backward_plans),
    "layernorm": (norms.layernorm_impl, norms.layernorm_plans),
    "norm_chain": (norms.norm_chain_impl, norms.norm_chain_plans),
}
NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum")
NCU_EXTRA: list[str] = []  # --ncu-extra: more metrics, reported per plan from its longest kernel
NVTX_RANGE = "long_rows"
T0 = time.time()
DEVICE = os.environ.get("LONG_ROWS_DEVICE", "cuda")


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


MAX_ONCHIP = [utils.MAX_ONCHIP]  # --max-onchip: longer rows than this get the long-row plans


EXTRA_PLANS: list[str] = []  # --plans: specs of plans to try instead of the wrapper's list
# LONG_ROWS_TIME_WRONG=1: time (and count the bytes of) wrong plans too -- for diagnostic variants of a
# kernel that leave out part of its work; their rows keep the "wrong" status.
TIME_WRONG = os.environ.get("LONG_ROWS_TIME_WRONG", "0") == "1"


def parse_plan(spec: str, shape) -> utils.RowPlan:
    """A plan from "loop:STEP:WARPS:GRID:STAGES", "stream:STEP:WARPS:PER_SM", "tile:ROWS:WARPS",
    "coop:CHUNK:WARPS:PER_SM:PREFETCH" or "reread:STEP:STEP2:WARPS" (STAGES 0: not pipelined, 1: next
    step prefetched; GRID 0: one program per row)."""
    mode, *v = spec.split(":")
    n = [int(x) for x in v]
    if mode == "loop" and len(n) == 4:
        return utils.loop_plan(n[0], n[1], grid=n[2], stages=n[3] or None)
    if mode == "stream" and len(n) == 3:
        return utils.stream_plan(DEVICE, n[0], n[1], n[2])
    if mode == "tile" and len(n) == 2:
        return utils.tile_plan(*shape, DEVICE, n[0], n[1])
    if mode == "coop" and len(n) == 4:
        return utils.coop_plan(*shape, DEVICE, n[0], n[1], n[2], bool(n[3]))
    if mode == "reread" and len(n) == 3:
        return utils.reread_plan(DEVICE, n[0], n[1], n[2])
    raise SystemExit(f"bad plan spec {spec!r}: loop:STEP:WARPS:GRID:STAGES, stream:STEP:WARPS:PER_SM, "
                     "tile:ROWS:WARPS, coop:CHUNK:WARPS:PER_SM:PREFETCH or reread:STEP:STEP2:WARPS")


def plans_for(case_name: str, shape, modes) -> list[utils.RowPlan]:
    if EXTRA_PLANS:
        return [parse_plan(spec, shape) for spec in EXTRA_PLANS]
    plans = CASES[case_name][1](*shape, DEVICE, max_onchip=MAX_ONCHIP[0])
    return [p for p in plans if p.mode in modes]


def copy_us(nbytes: int) -> float:
    """Median time of dst.copy_(src), each buffer nbytes / 2 (bytes read plus written = nbytes)."""
    src = torch.empty(nbytes // 8, dtype=torch.float32, device=DEVICE).uniform_()
    dst = torch.empty_like(src)
    us = utils.gpu_time_stats(lambda: dst.copy_(src), DEVICE, budget_ms=50.0).median_us
    return us


def measure(case_name: str, shape, modes, peak_gbps: float) -> list[dict]:
    case = get_case(case_name)
    impl = CASES[case_name][0]
    args = case.make_inputs(shape, torch.float32, DEVICE, 0)
    ref = case.run_reference(args)
    atol, rtol = case.tolerance(torch.float32)
    nbytes = case.min_bytes(shape, torch.float32)
    copy_gbps = nbytes / copy_us(nbytes) / 1e3
    rows = []
    for i, plan in enumerate(plans_for(case_name, shape, modes)):
        row = dict(case=case_name, shape="x".join(map(str, shape)), index=i, mode=plan.mode, plan=plan.describe(),
                   status="ok", time_us="", gbps="", of_copy="", of_peak="", copy_gbps=round(copy_gbps, 1))
        try:
            acc = compare(impl(*args, plan=plan), ref, atol, rtol)
            if not acc.passed:
                row["status"] = f"wrong: tol_ratio {acc.tol_ratio:.3g} {acc.detail}".strip()
            if acc.passed or TIME_WRONG:
                us = utils.gpu_time_stats(lambda: impl(*args, plan=plan), DEVICE, budget_ms=50.0).median_us
                gbps = nbytes / us / 1e3
                row.update(time_us=round(us, 2), gbps=round(gbps, 1), of_copy=round(gbps / copy_gbps, 3),
                           of_peak=round(gbps / peak_gbps, 3))
        except Exception as exc:  # noqa: BLE001 - e.g. a cooperative grid that does not fit
            row["status"] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        rows.append(row)
        log(f"{case_name} {row['shape']} #{i} {plan.describe()}: {row['status']} {row['time_us']} us "
            f"{row['of_copy']} of copy")
    return rows


def ncu_child(case_name: str, shape, modes, indices: list[int]) -> None:
    """Under ncu: warm each plan up, then run each once inside the NVTX range, our flush before it."""
    case = get_case(case_name)
    impl = CASES[case_name][0]
    plans = plans_for(case_name, shape, modes)
    args = case.make_inputs(shape, torch.float32, "cuda", 0)
    flush = _flush_buffer("cuda")  # the cells' flush buffers
    for i in indices:
        impl(*args, plan=plans[i])
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(NVTX_RANGE)
    for i in indices:
        _flush_l2(flush, "clean")  # the cells' flush: evict_last stores, then a read sweep
        impl(*args, plan=plans[i])
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


def ncu_groups(ncu: str, child: list[str], metrics, cache_control: str) -> tuple[list, str]:
    """Profile `child` under ncu: per plan, the [(kernel name, metrics)] it launched, in order (each
    plan's kernels follow our two flush kernels), and ncu's output for error messages."""
    with tempfile.TemporaryDirectory() as tmp:
        log_file = os.path.join(tmp, "ncu.csv")
        cmd = ncu_command(ncu, log_file, child, metrics, NVTX_RANGE, cache_control=cache_control)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        text = open(log_file).read() if os.path.exists(log_file) else ""
    groups, cur = [], None
    for k in parse_ncu_csv(text)["kernels"]:
        if "zero_evict_last" in k["name"]:
            cur = []
            groups.append(cur)
        elif "read_evict_last" in k["name"]:
            continue
        elif cur is not None:
            cur.append((k["name"], k))
    return groups, text + proc.stdout + proc.stderr


def ncu_traffic(case_name: str, shape, modes, rows: list[dict]) -> None:
    """Add DRAM read/write multiples (and the --ncu-extra metrics) to the rows of plans that ran
    correctly (in place)."""
    ncu = find_ncu()
    ok = [r for r in rows if r["time_us"] != ""]  # the timed ones (see TIME_WRONG)
    if ncu is None or not ok:
        for r in ok:
            r["dram"] = "not available: ncu not found"
        return
    child = [sys.executable, os.path.abspath(__file__), "--plans", ";".join(EXTRA_PLANS),
             "--max-onchip", str(MAX_ONCHIP[0]), "--ncu-child", case_name, "x".join(map(str, shape)),
             ",".join(modes), ",".join(str(r["index"]) for r in ok)]
    # DRAM bytes in one pass after our own flush (no ncu cache control, as the cells are timed).
    groups, out = ncu_groups(ncu, child, NCU_METRICS, "none")
    if len(groups) != len(ok):
        why = ncu_failure(out) or f"{len(groups)} plans profiled of {len(ok)}"
        for r in ok:
            r["dram"] = f"not available: {why}"
        return
    nbytes = get_case(case_name).min_bytes(shape, torch.float32)
    in_bytes = out_bytes = nbytes / 2
    if case_name == "softmax_backward":
        in_bytes, out_bytes = nbytes * 2 / 3, nbytes / 3
    for r, group in zip(ok, groups):
        read = sum(v.get("dram__bytes_read.sum") or 0.0 for _, v in group)
        write = sum(v.get("dram__bytes_write.sum") or 0.0 for _, v in group)
        ns = sum(v.get("gpu__time_duration.sum") or 0.0 for _, v in group)
        r.update(read_x=round(read / in_bytes, 3), write_x=round(write / out_bytes, 3), ncu_us=round(ns / 1e3, 2),
                 kernels=" ".join(n.split("(")[0] for n, _ in group))
    if not NCU_EXTRA:
        return
    # The extra metrics take several replay passes of each kernel: ncu flushes the caches before
    # every pass, so that each pass starts as the timed calls do (L2 cold).
    groups, out = ncu_groups(ncu, child, (*NCU_EXTRA, "gpu__time_duration.sum"), "all")
    if len(groups) != len(ok):
        why = ncu_failure(out) or f"{len(groups)} plans profiled of {len(ok)}"
        log(f"--ncu-extra not available: {why}")
        groups = [[]] * len(ok)
    for r, group in zip(ok, groups):
        longest = max((v for _, v in group), key=lambda v: v.get("gpu__time_duration.sum") or 0.0, default={})
        r.update({m: longest.get(m, "") for m in NCU_EXTRA})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--shapes", default="1024x65536,8192x65536")
    ap.add_argument("--modes", default="loop,split,coop")
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--ncu-extra", default="", help="comma-separated Nsight Compute metrics to add (with --ncu)")
    ap.add_argument("--max-onchip", type=int, default=utils.MAX_ONCHIP)
    ap.add_argument("--plans", default="", help="';'-separated plan specs (see parse_plan) instead of the wrapper's")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--ncu-child", nargs=4, metavar=("CASE", "SHAPE", "MODES", "INDICES"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    MAX_ONCHIP[0] = a.max_onchip
    EXTRA_PLANS[:] = [p for p in a.plans.split(";") if p]
    NCU_EXTRA[:] = [m for m in a.ncu_extra.split(",") if m]
    if a.ncu_child:
        case_name, shape_s, modes, idx = a.ncu_child
        ncu_child(case_name, tuple(map(int, shape_s.split("x"))), modes.split(","), [int(i) for i in idx.split(",")])
        return
    if DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit("bench/long_rows.py needs a GPU")
    unknown = [c for c in a.cases.split(",") if c not in CASES]
    if unknown:
        sys.exit(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    modes = a.modes.split(",")
    peak_bytes = 2**31 if DEVICE == "cuda" else 2**24
    peak = peak_bytes / copy_us(peak_bytes) / 1e3
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE
    log(f"{name}: copy of {peak_bytes // 2**21} MiB per buffer {peak:.0f} GB/s")
    rows = []
    for case_name in a.cases.split(","):
        for shape_s in a.shapes.split(","):
            shape = tuple(map(int, shape_s.split("x")))
            res = measure(case_name, shape, modes, peak)
            if a.ncu:
                ncu_traffic(case_name, shape, modes, res)
            rows += res
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "long_rows.csv")
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    for r in sorted(rows, key=lambda r: (r["case"], r["shape"], -(r["of_copy"] or 0))):
        note = "" if r["status"] == "ok" else r["status"]
        print(f"{r['case']:17s} {r['shape']:>11s} {r['of_copy'] or '-':>6} of copy  {r['time_us'] or '-':>9} us  "
              f"read {r.get('read_x', '-')}x write {r.get('write_x', '-')}x  {r['plan']}  {note}")
        if NCU_EXTRA and r.get("read_x") is not None:
            print("    " + "  ".join(f"{m} {r.get(m, '-')}" for m in NCU_EXTRA))
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
