#!/usr/bin/env python
"""GPU benchmark of fusebench's memory-bound Triton kernels against PyTorch eager and
torch.compile (Inductor), standalone (no fusebench runner).

    PYTHONPATH=. python bench/membound.py [--cases softmax,layernorm] [--shapes 8192x8192,128x65536]
                                          [--dtypes fp32] [--budget 270] [--jobs 8] [--no-prep]

1. The device copy bandwidth: a large dst.copy_(src), bytes read plus bytes written.
2. Prep, in --jobs worker processes at once: for every (case, shape) compile Inductor's version
   (into its on-disk caches, autotuned configs not saved, so the timing process benchmarks them
   itself on an idle GPU) and run *every* candidate launch plan of our kernel, checking each
   against a reference (float64 where it fits, else eager's output with twice the tolerance);
   plus a correctness sweep at small odd shapes, bf16, strided views and the long-row plans.
   This fills Triton's and Inductor's caches so that the timing phase compiles little.
3. Timing, one cell at a time, largest shapes first: eager, torch.compile(fn) (a fresh Dynamo
   state per cell) and our kernel (autotuned on its first call, then timed), each with
   triton.testing.do_bench (median; L2 flushed before every call).  GB/s = case.min_bytes(shape,
   dtype) / time.  Cells not reached within --budget seconds are reported as skipped.
   Caveat (session 6): do_bench's flush zeroes a buffer with ordinary stores, which leaves lines
   loaded `evict_last` -- most of Inductor's inputs -- in L2, so Inductor's times here are
   optimistic wherever its inputs fit in L2.  `fusebench run` (and bench/grids.sh) flush with
   evict_last stores (measure.timing); use them for numbers to report.

Prints one line per cell as it goes and summary tables at the end; writes $OUT/membound.csv when
OUT is set.
"""
from __future__ import annotations

import argparse
import csv
import math
import multiprocessing as mp
import os
import sys
import time
import traceback

from fusebench.cases import MEMORY_BOUND

T0 = time.time()

CASES = MEMORY_BOUND
ROWWISE = {"softmax", "double_softmax", "softmax_backward", "layernorm", "norm_chain",
           "horizontal_reduction_pointwise", "horizontal_reduction_reduction"}
# Timing order: big tensors and the compiler's weak spots first.
SHAPES = ["8192x8192", "128x65536", "16384x16384", "2048x65536", "8192x65536", "65536x128", "4096x4096",
          "3000x5000"]
# (dtype, shape) cells timed besides every --dtypes x --shapes one.
EXTRA = "bf16:8192x8192,bf16:2048x65536,fp16:128x65536"
# Correctness sweep: (shape, dtype, layout); layouts: "c" contiguous, "rows" padded rows, "cols" column-major.
SWEEP = [((257, 1000), "fp16", "c"), ((257, 1000), "bf16", "c"), ((3, 70000), "fp32", "c"),
         ((3, 70000), "bf16", "c"), ((600, 20000), "fp16", "c"), ((513, 2000), "fp32", "rows"),
         ((300, 20000), "fp32", "rows"), ((96, 333), "fp32", "cols"), ((20000, 100), "bf16", "c")]
REF64_MAX_NUMEL = 2**25
# For a dry run of the prep jobs on the CPU (with TRITON_INTERPRET=1): MEMBOUND_DEVICE=cpu.
DEVICE = os.environ.get("MEMBOUND_DEVICE", "cuda")


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


# ----------------------------------------------------------------------------------------------
# helpers shared by the worker processes and the main one


def setup_torch():
    import torch
    import torch._inductor.config as icfg

    torch.backends.cuda.matmul.allow_tf32 = False
    # Autotuned Inductor configs are not written to disk by the prep workers (which benchmark on a
    # shared GPU); the timing process picks its own.
    if hasattr(icfg, "autotune_local_cache"):
        icfg.autotune_local_cache = False
    return torch


def candidates(name, args):
    """The candidate launch plans the wrapper autotunes over for these inputs."""
    from fusebench.kernels import horizontal as kh, pointwise as kpw, softmax as ksm, utils

    M, N = args[0].shape
    dev = args[0].device
    if name == "double_softmax":
        return ksm.double_softmax_plans(M, N, dev, elem_size=args[0].element_size())
    if name.startswith("horizontal"):
        return kh.horizontal_plans(M, N, dev, with_cos=name.endswith("pointwise"), elem_size=args[0].element_size())
    if name in ROWWISE:
        return utils.row_plans(M, N, dev, elem_size=args[0].element_size())
    traffic = kpw.traffic_bytes(*args) + M * N * args[0].element_size()  # + the output
    if name == "bias_dropout_add_transposed":
        return kpw.transposed_plans(M, N, dev, traffic)
    if name == "bias_gelu" or not all(a.is_contiguous() for a in args):
        return kpw.element_wise_plans(M, N, dev, traffic)
    return kpw.element_wise_plans(1, M * N, dev, traffic)  # contiguous operands are viewed as one row


def impl_of(name):
    from fusebench.kernels import horizontal as kh, norms as kn, pointwise as kp, softmax as ks

    return {"softmax": ks.softmax_impl, "double_softmax": ks.double_softmax_impl,
            "softmax_backward": ks.softmax_backward_impl, "layernorm": kn.layernorm_impl,
            "norm_chain": kn.norm_chain_impl,
            "horizontal_reduction_pointwise": kh.horizontal_reduction_pointwise_impl,
            "horizontal_reduction_reduction": kh.horizontal_reduction_reduction_impl,
            "pointwise_chain": kp.pointwise_chain_impl, "bias_gelu": kp.bias_gelu_impl,
            "bias_dropout_add": kp.bias_dropout_add_impl,
            "bias_dropout_add_transposed": kp.bias_dropout_add_transposed_impl}[name]


def error_ratio(case, out, ref, dtype, slack=1.0) -> float:
    """max over elements of |out - ref| / (atol * max|ref| + rtol * |ref|); <= 1 passes."""
    import torch

    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    atol, rtol = case.tolerance(dtype)
    worst = 0.0
    for o, r in zip(outs, refs):
        if o.shape != r.shape or o.dtype != dtype:
            return float("inf")
        o, r = o.double(), r.double()
        if not torch.isfinite(o).all():
            return float("inf")
        bound = slack * (atol * r.abs().max() + rtol * r.abs())
        worst = max(worst, ((o - r).abs() / bound).max().item())
    return worst


def reference(case, args, dtype):
    """(reference outputs, slack): float64 when small enough, else eager with twice the tolerance."""
    n = args[0].numel()
    if n <= REF64_MAX_NUMEL:
        return case.run_reference(args), 1.0
    return case.fn(*args), 2.0


def layout(t, how):
    import torch

    if not isinstance(t, torch.Tensor) or t.dim() != 2 or how == "c":
        return t
    if how == "rows":
        wide = torch.empty((t.shape[0], t.shape[1] + 13), dtype=t.dtype, device=t.device)
        wide[:, : t.shape[1]] = t
        return wide[:, : t.shape[1]]
    return t.t().contiguous().t()


# ----------------------------------------------------------------------------------------------
# prep worker


def prep_job(job):
    """Compile and check one cell; returns a list of result lines (failures start with FAIL)."""
    kind, name, shape, dtype_name, how = job
    torch = setup_torch()
    from fusebench.cases import get_case, parse_dtype

    case = get_case(name)
    dtype = parse_dtype(dtype_name)
    lines = []
    try:
        args = tuple(layout(a, how) for a in case.make_inputs(shape, dtype, DEVICE, 0))
        if kind == "time":
            torch._dynamo.reset()
            torch.compile(case.fn)(*args)
        ref, slack = reference(case, args, dtype)
        for plan in candidates(name, args):
            try:
                out = impl_of(name)(*args, plan=plan)
            except Exception as exc:  # noqa: BLE001
                if "cooperative" in str(exc).lower():  # more programs than fit at once: not a bug
                    lines.append(f"skip {name} {shape[0]}x{shape[1]} {plan}: {str(exc)[:100]}")
                    continue
                raise
            ratio = error_ratio(case, out, ref, dtype, slack)
            tag = "ok  " if ratio <= 1.0 else "FAIL"
            lines.append(f"{tag} {name} {shape[0]}x{shape[1]} {dtype_name} {how} {plan} err/tol={ratio:.3g}")
            del out
    except Exception as exc:  # noqa: BLE001
        lines.append(f"FAIL {name} {shape} {dtype_name} {how}: {type(exc).__name__}: {exc}\n"
                     + traceback.format_exc(limit=4))
    finally:
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    return lines


def coop_smoke() -> int:
    """Run each cooperative kernel once, checked; exit status 0 when all are right.  Run in a
    subprocess with a timeout by main(), so that a barrier bug cannot hang the benchmark."""
    torch = setup_torch()
    from fusebench.cases import get_case
    from fusebench.kernels import utils

    bad = 0
    for name in ["softmax", "double_softmax", "softmax_backward", "layernorm", "norm_chain"]:
        case = get_case(name)
        for shape in [(300, 40000), (3, 70000)]:
            args = case.make_inputs(shape, torch.float32, "cuda", 1)
            plan = utils.coop_plan(shape[0], shape[1], "cuda", 8192, 16, 1)
            out = impl_of(name)(*args, plan=plan)
            again = impl_of(name)(*args, plan=plan)  # the counters were reset
            ref = case.run_reference(args)
            ratio = max(error_ratio(case, out, ref, torch.float32), error_ratio(case, again, ref, torch.float32))
            print(f"coop smoke {name} {shape} {plan.describe()}: err/tol={ratio:.3g}", flush=True)
            bad += not ratio <= 1.0
    return 1 if bad else 0


def _worker_init():
    os.environ["FUSEBENCH_AUTOTUNE"] = "0"  # prep runs every plan explicitly
    # Parallelism comes from the worker processes: no compile sub-pool in each of them.
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"


def run_prep(jobs, n_jobs, deadline):
    ctx = mp.get_context("spawn")
    failures, done = [], 0
    pool = ctx.Pool(n_jobs, initializer=_worker_init)
    try:
        it = pool.imap_unordered(prep_job, jobs)
        while done < len(jobs):
            left = deadline - time.time()
            if left <= 0:
                log(f"prep: deadline reached after {done}/{len(jobs)} jobs")
                break
            try:
                lines = it.next(timeout=left)
            except mp.TimeoutError:
                log(f"prep: deadline reached after {done}/{len(jobs)} jobs")
                break
            done += 1
            failures += [ln for ln in lines if ln.startswith("FAIL")]
    finally:
        pool.terminate()
        pool.join()
    log(f"prep: {done}/{len(jobs)} jobs, {len(failures)} failures")
    for ln in failures:
        print(ln, flush=True)
    return done, failures


# ----------------------------------------------------------------------------------------------
# timing


def copy_bandwidth(torch, do_bench):
    n = 2**28  # 1 GiB of fp32 each way
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median")
    return 2 * n * 4 / (ms * 1e-3) / 1e9


def time_cell(torch, do_bench, name, shape, dtype, utils, KERNELS, get_case):
    case = get_case(name)
    args = case.make_inputs(shape, dtype, "cuda", 0)
    row = {"case": name, "shape": f"{shape[0]}x{shape[1]}", "dtype": str(dtype).replace("torch.", ""),
           "min_bytes": case.min_bytes(shape, dtype), "tensor_MiB": args[0].numel() * args[0].element_size() / 2**20}
    fn = KERNELS[name].fn
    # our kernel: autotune on the first call, check against eager
    before = set(utils.tuned())
    out = fn(*args)
    torch.cuda.synchronize()
    new = [v for k, v in utils.tuned().items() if k not in before]
    row["plan"] = new[0].describe() if new else "(cached or heuristic)"
    eager_out = case.fn(*args)
    row["err_vs_eager"] = error_ratio(case, out, eager_out, dtype, 2.0)
    del out, eager_out
    bench = dict(warmup=10, rep=50, return_mode="median")
    row["eager_ms"] = do_bench(lambda: case.fn(*args), **bench)
    torch._dynamo.reset()
    compiled = torch.compile(case.fn)
    t = time.time()
    compiled(*args)
    torch.cuda.synchronize()
    row["inductor_compile_s"] = time.time() - t
    row["inductor_ms"] = do_bench(lambda: compiled(*args), **bench)
    row["triton_ms"] = do_bench(lambda: fn(*args), **bench)
    for impl in ("eager", "inductor", "triton"):
        row[f"{impl}_GBs"] = row["min_bytes"] / (row[f"{impl}_ms"] * 1e-3) / 1e9
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--dtypes", default="fp32")
    ap.add_argument("--extra", default=EXTRA, help="more cells as dtype:shape, comma separated")
    ap.add_argument("--budget", type=float, default=270.0, help="seconds from start; later cells are skipped")
    ap.add_argument("--prep-budget", type=float, default=150.0, help="seconds from start for the prep phase")
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--no-prep", action="store_true")
    ap.add_argument("--no-sweep", action="store_true", help="skip the small-shape correctness sweep")
    ap.add_argument("--no-coop-smoke", action="store_true")
    ap.add_argument("--coop-smoke", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.coop_smoke:
        return coop_smoke()

    torch = setup_torch()
    import triton
    from triton.testing import do_bench

    from fusebench.cases import get_case, parse_dtype, parse_shape
    from fusebench.kernels import KERNELS, load_all, utils

    errors = load_all()
    cases = [c for c in opts.cases.split(",") if c]
    shapes = [parse_shape(s, 2) for s in opts.shapes.split(",") if s]
    dtypes = [d for d in opts.dtypes.split(",") if d]
    pairs = [(d, s) for d in dtypes for s in shapes]
    pairs += [(e.split(":")[0], parse_shape(e.split(":")[1], 2)) for e in opts.extra.split(",") if e]
    props = torch.cuda.get_device_properties(0)
    log(f"device: {props.name}, {props.multi_processor_count} SMs, L2 {getattr(props, 'L2_cache_size', 0) / 2**20:.0f} MiB, "
        f"{props.total_memory / 2**30:.0f} GiB; torch {torch.__version__}, triton {triton.__version__}; "
        f"kernel load errors: {errors or 'none'}")

    if not opts.no_coop_smoke:
        import subprocess

        try:
            smoke = subprocess.run([sys.executable, os.path.abspath(__file__), "--coop-smoke"], timeout=120,
                                   capture_output=True, text=True)
            print(smoke.stdout[-3000:] + smoke.stderr[-2000:], flush=True)
            coop_ok = smoke.returncode == 0
        except subprocess.TimeoutExpired:
            coop_ok = False
        if not coop_ok:
            os.environ["FUSEBENCH_COOP"] = "0"  # inherited by the prep workers
        log(f"cooperative kernels: {'on' if coop_ok else 'OFF (smoke test failed or timed out)'}")

    copy_gbs = copy_bandwidth(torch, do_bench)
    torch.cuda.empty_cache()  # the copy's 2 GiB back to the device, for the prep workers
    log(f"copy bandwidth (read + write): {copy_gbs:.0f} GB/s")

    failures = []
    if not opts.no_prep:
        # case-major order: consecutive jobs have different shapes, so the largest ones are
        # not all in GPU memory at once
        jobs = [("time", c, s, d, "c") for c in cases for d, s in pairs]
        if not opts.no_sweep:
            jobs += [("check", c, s, d, how) for s, d, how in SWEEP for c in cases]
        _, failures = run_prep(jobs, opts.jobs, T0 + opts.prep_budget)
        if any("coop" in f for f in failures):
            os.environ["FUSEBENCH_COOP"] = "0"
            log("cooperative kernels: OFF (a cooperative plan failed a check)")

    out_dir = os.environ.get("OUT")
    csv_file = open(os.path.join(out_dir, "membound.csv"), "w", newline="") if out_dir else None
    fields = ["case", "shape", "dtype", "tensor_MiB", "min_bytes", "eager_ms", "inductor_ms", "triton_ms", "eager_GBs",
              "inductor_GBs", "triton_GBs", "pct_copy", "speedup_vs_inductor", "speedup_vs_eager", "err_vs_eager",
              "inductor_compile_s", "plan", "status"]
    writer = csv.DictWriter(csv_file, fieldnames=fields) if csv_file else None
    if writer:
        writer.writeheader()

    rows = []
    log(f"{'case':31s} {'shape':12s} {'MiB':>6s} {'eager':>6s} {'induct':>6s} {'triton':>6s} GB/s  "
        f"{'%copy':>5s} {'x ind':>5s} {'x eag':>5s}  plan")
    for d, shape in pairs:
        dtype = parse_dtype(d)
        for name in cases:
            row = {"case": name, "shape": f"{shape[0]}x{shape[1]}", "dtype": d}
            if time.time() - T0 > opts.budget:
                row["status"] = "skipped (budget)"
            else:
                try:
                    row = time_cell(torch, do_bench, name, shape, dtype, utils, KERNELS, get_case)
                    row["pct_copy"] = 100 * row["triton_GBs"] / copy_gbs
                    row["speedup_vs_inductor"] = row["inductor_ms"] / row["triton_ms"]
                    row["speedup_vs_eager"] = row["eager_ms"] / row["triton_ms"]
                    row["status"] = "ok" if row["err_vs_eager"] <= 1 else "WRONG"
                    log(f"{name:31s} {row['shape'] + ('' if d == 'fp32' else ' ' + d):12s} "
                        f"{row['min_bytes'] / 2**20:6.0f} {row['eager_GBs']:6.0f} "
                        f"{row['inductor_GBs']:6.0f} {row['triton_GBs']:6.0f}       {row['pct_copy']:5.1f} "
                        f"{row['speedup_vs_inductor']:5.2f} {row['speedup_vs_eager']:5.2f}  {row['plan']}"
                        + ("" if row["status"] == "ok" else f"  {row['status']} err/tol={row['err_vs_eager']:.3g}"))
                except torch.cuda.OutOfMemoryError:
                    row["status"] = "OOM"
                except Exception as exc:  # noqa: BLE001
                    row["status"] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
                    traceback.print_exc(limit=3)
                torch.cuda.empty_cache()
            if row["status"] != "ok":
                log(f"{name:31s} {row['shape']:12s} {row['status']}")
            rows.append(row)
            if writer:
                writer.writerow({k: row.get(k, "") for k in fields})
                csv_file.flush()

    # ------------------------------------------------------------------------------------------
    # summary
    ok = [r for r in rows if r.get("status") == "ok"]
    print(f"\n=== {props.name}: copy bandwidth {copy_gbs:.0f} GB/s (read + write); GB/s from case.min_bytes; "
          f"{len(ok)}/{len(rows)} cells timed; prep failures: {len(failures)}")
    print(f"{'case':31s} {'shape':12s} {'eager':>6s} {'induct':>6s} {'triton':>6s} {'%copy':>6s} {'x ind':>6s} {'x eag':>6s}")
    for r in ok:
        shp = r["shape"] + ("" if r["dtype"] == "float32" else " " + r["dtype"].replace("float", "fp").replace("bfp", "bf"))
        print(f"{r['case']:31s} {shp:12s} {r['eager_GBs']:6.0f} {r['inductor_GBs']:6.0f} {r['triton_GBs']:6.0f} "
              f"{r['pct_copy']:6.1f} {r['speedup_vs_inductor']:6.2f} {r['speedup_vs_eager']:6.2f}")
    print("\ngeometric-mean speedup of triton over the timed fp32 shapes, per case (vs inductor, vs eager):")
    for name in cases:
        rs = [r for r in ok if r["case"] == name and r["dtype"] == "float32"]
        if rs:
            gi = math.exp(sum(math.log(r["speedup_vs_inductor"]) for r in rs) / len(rs))
            ge = math.exp(sum(math.log(r["speedup_vs_eager"]) for r in rs) / len(rs))
            print(f"  {name:31s} {gi:5.2f}x  {ge:5.2f}x  ({len(rs)} shapes)")
    big = [r for r in ok if r["tensor_MiB"] > 64]
    below = [r for r in big if r["pct_copy"] < 90]
    slower = [r for r in ok if r["speedup_vs_inductor"] < 0.95]
    print(f"\nbelow 90% of copy at tensors > 64 MiB: {[(r['case'], r['shape'], round(r['pct_copy'], 1)) for r in below]}")
    print(f"slower than 0.95x inductor: {[(r['case'], r['shape'], round(r['speedup_vs_inductor'], 2)) for r in slower]}")
    bad = [r for r in rows if r.get("status") not in ("ok", "skipped (budget)")]
    print(f"wrong / failed cells: {[(r['case'], r['shape'], r['status']) for r in bad]}")
    log("done")
    if csv_file:
        csv_file.close()
    return 1 if failures or bad else 0


if __name__ == "__main__":
    sys.exit(main())
