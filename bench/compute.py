#!/usr/bin/env python
"""GPU benchmark of fusebench's compute-bound Triton kernels (matmul epilogues, back-to-back GEMM,
conv epilogues, attention) against PyTorch eager, torch.compile (Inductor) and vendor kernels.

    PYTHONPATH=. python bench/compute.py [--sections matmul,b2b,conv,attention] [--budget 260]
                                         [--jobs 12] [--inductor some|all|none]

Every implementation's output is checked first (float64 reference where it fits in memory, else
eager's output with twice the case's tolerance), then timed with triton.testing.do_bench (L2
flushed before each call, median and 20th/80th percentiles).  TFLOP/s come from
case.flops(shape, dtype).  Rows stream to stdout and, when $OUT is set, to $OUT/compute.csv;
summary tables are printed at the end.  Implementations not reached within --budget seconds are
recorded as skipped.

Before timing, the Triton kernels are compiled in parallel (--jobs worker processes, each forcing
one autotune config on a small proxy problem with the same specialization as the real ones) into
Triton's on-disk cache, so that autotuning in the timed process only loads binaries.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import json
import multiprocessing as mp
import os
import sys
import time
import traceback

T0 = time.time()

MATMUL_BIG = [(4096, 4096, 4096), (8192, 8192, 8192)]
MATMUL_SMALL = [(1024, 1024, 1024), (256, 4096, 4096), (16384, 1024, 1024)]  # samples of the grid
B2B = [(8192, 128, 128, 128), (4096, 1024, 1024, 1024)]
CONV_LAYERS = [(32, 64, 56, 56, 64, 3, 1), (32, 128, 56, 56, 128, 3, 2), (32, 256, 14, 14, 1024, 1, 1),
               (32, 512, 7, 7, 512, 3, 1)]
ATTN = [(4, 16, 2048, 128, 0), (4, 16, 2048, 128, 1), (4, 16, 8192, 128, 0), (4, 16, 8192, 128, 1),
        (4, 32, 4096, 64, 0), (4, 32, 4096, 64, 1)]

WARMUP_MS, REP_MS = 10, 60
ROUNDS = 3  # interleaved timing passes for the matmul and attention cells


def elapsed() -> float:
    return time.time() - T0


def log(*a):
    print(f"[{elapsed():6.1f}s]", *a, flush=True)


# ------------------------------------------------------------------------------------------------
# Parallel precompilation


@contextlib.contextmanager
def only_config(tuner, cfg):
    """Make an autotuner run exactly `cfg` (no benchmarking) for the duration of the block."""
    saved = tuner.configs
    tuner.configs = [cfg]
    try:
        yield
    finally:
        tuner.configs = saved


def _tuner(kind, impl):
    import fusebench.kernels.attention as katt
    import fusebench.kernels.conv as kconv
    import fusebench.kernels.matmul as kmm
    return {("gemm", "ptr"): kmm._gemm_kernel, ("gemm", "tma"): kmm._gemm_tma_kernel, ("b2b", None): kmm._b2b_kernel,
            ("attn", "ptr"): katt._attn_fwd, ("attn", "tma"): katt._attn_fwd_tma,
            ("igemm", None): kconv._conv_igemm_kernel}[(kind, impl)]


def _proxy_call(job):
    """Run the kernel of `job` once on a small problem specialised like the benchmark's shapes."""
    import torch
    import fusebench.kernels.attention as katt
    import fusebench.kernels.conv as kconv
    import fusebench.kernels.matmul as kmm
    kind, dtype_name, impl, extra, _ = job
    dt = getattr(torch, dtype_name)
    dev = "cuda"
    if kind == "gemm":
        b_trans = extra
        a = torch.randn(256, 256, device=dev, dtype=dt)
        b = torch.randn(256, 256, device=dev, dtype=dt)
        b = b.t() if b_trans else b
        kmm.gemm(a, b, bias=torch.randn(256, device=dev, dtype=dt), relu=True, impl=impl)
    elif kind == "b2b":
        kmm.b2b(*(torch.randn(s, device=dev, dtype=dt) for s in ((256, 128), (128, 128), (128, 128))))
    elif kind == "attn":
        d, causal = extra
        q, k, v = (torch.randn(1, 16, 256, d, device=dev, dtype=dt) for _ in range(3))
        katt.flash_attention(q, k, v, bool(causal), impl=impl)
    elif kind == "igemm":
        (n, cin, h, w, cout, r, stride), cl = extra
        fmt = torch.channels_last if cl else torch.contiguous_format
        x = torch.randn(16, cin, h, w, device=dev, dtype=dt).contiguous(memory_format=fmt)
        wt = torch.randn(cout, cin, r, r, device=dev, dtype=dt).contiguous(memory_format=fmt)
        kconv.conv_fused(x, wt, stride, bias=torch.randn(cout, device=dev, dtype=dt), relu=True, path="igemm")


def _warm(job):
    t = time.time()
    try:
        import torch
        kind, _, impl, _, cfg_index = job
        tuner = _tuner(kind, impl)
        with only_config(tuner, tuner.configs[cfg_index]):
            _proxy_call(job)
        torch.cuda.synchronize()
        return job, time.time() - t, None
    except Exception as e:  # OutOfResources and the like: the autotuner will skip that config too
        return job, time.time() - t, f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def warm_jobs(sections, dtypes_mm, dtypes_attn):
    jobs = []

    def add(kind, dt, impl, extra):
        for i in range(len(_tuner(kind, impl).configs)):
            jobs.append((kind, dt, impl, extra, i))

    from fusebench.kernels.gemm_utils import has_tensor_descriptors
    gemm_impls = ["ptr", "tma"] if has_tensor_descriptors() else ["ptr"]
    if "attention" in sections:
        for dt in dtypes_attn:
            for impl in gemm_impls:
                for d in sorted({s[3] for s in ATTN}):
                    for c in (0, 1):
                        add("attn", dt, impl, (d, c))
    if "conv" in sections:
        for layer in CONV_LAYERS:
            for cl in (1, 0):
                add("igemm", "float16", None, (layer, cl))
    if "matmul" in sections or "b2b" in sections or "conv" in sections:
        for dt in dtypes_mm:
            for impl in gemm_impls:
                add("gemm", dt, impl, False)
                if "conv" in sections and dt == "float16":
                    add("gemm", dt, impl, True)  # 1x1 conv: the weight is a transposed view
    if "b2b" in sections:
        for dt in dtypes_mm:
            add("b2b", dt, None, None)
    return jobs


def precompile(jobs, workers, timeout):
    if not jobs or workers <= 0:
        return
    log(f"precompiling {len(jobs)} kernel/config variants on {workers} processes")
    ctx = mp.get_context("spawn")
    t = time.time()
    failed = 0
    pool = ctx.Pool(workers)
    try:
        results = pool.imap_unordered(_warm, jobs)
        deadline = time.time() + timeout
        for _ in range(len(jobs)):
            job, secs, err = results.next(timeout=max(1.0, deadline - time.time()))
            if err:
                failed += 1
                if "OutOfResources" not in err:
                    log(f"  warm {job}: {err}")
    except mp.TimeoutError:
        log(f"  precompile stopped after {timeout:.0f}s; the rest compiles while autotuning")
    except Exception as e:
        log(f"  precompile failed: {type(e).__name__}: {e}")
    finally:
        pool.terminate()
        pool.join()
    log(f"precompile done in {time.time() - t:.1f}s ({failed} variants did not build: out of resources etc.)")


# ------------------------------------------------------------------------------------------------
# Measurement


class Bench:
    def __init__(self, budget, out_dir):
        import torch
        self.torch = torch
        self.budget = budget
        self.rows = []
        self.csv = None
        if out_dir:
            os.makedirs(out_dir, exist_ok=True)
            self.csv_file = open(os.path.join(out_dir, "compute.csv"), "w", newline="")
            self.csv = csv.writer(self.csv_file)
            self.csv.writerow(["section", "case", "shape", "dtype", "impl", "ms", "ms_p20", "ms_p80", "tflops", "ok",
                               "max_err", "ref", "note"])

    def record(self, **row):
        self.rows.append(row)
        if self.csv:
            self.csv.writerow([row.get(k, "") for k in ("section", "case", "shape", "dtype", "impl", "ms", "ms_p20",
                                                        "ms_p80", "tflops", "ok", "max_err", "ref", "note")])
            self.csv_file.flush()
        ms = row.get("ms")
        tf = row.get("tflops")
        log(f"{row['case']:16s} {row['shape']:24s} {row['dtype']:5s} {row['impl']:16s} "
            + (f"{ms:9.4f} ms {tf:7.1f} TFLOP/s ok={row['ok']} err={row['max_err']:.2e}" if ms is not None
               else "  --  ") + f"  {row.get('note', '')}")

    def reference(self, case, shape, args, dtype):
        torch = self.torch
        if case.name == "attention":
            b, h, s = shape[:3]
            if b * h * s * s * 8 * 3 > 12e9:  # the float64 math would not fit: compare with eager
                with torch.no_grad():
                    return case.fn(*args), "eager", 2.0
        return case.run_reference(args), "fp64", 1.0

    def check(self, out, ref, tol, scale):
        torch = self.torch
        atol, rtol = tol
        out = out.to(ref.dtype)
        finite = bool(torch.isfinite(out).all())
        err = (out - ref).abs()
        bound = scale * (atol * ref.abs().max() + rtol * ref.abs())
        ok = finite and bool((err <= bound).all())
        return ok, float(err.max())

    def cell(self, section, case_name, shape, dtype, impls, rounds=1):
        """impls: list of (name, make(args) -> (zero-arg callable, note-fn or None))."""
        torch = self.torch
        from fusebench.cases.base import DTYPE_NAMES, get_case, shape_str
        import triton
        case = get_case(case_name)
        if elapsed() > self.budget:
            for n, _ in impls:
                self.record(section=section, case=case_name, shape=shape_str(shape), dtype=DTYPE_NAMES[dtype],
                            impl=n, ok="", max_err=0.0, note="skipped: out of time budget")
            return
        args = case.make_inputs(shape, dtype, "cuda", 0)
        ref, ref_kind, scale = self.reference(case, shape, args, dtype)
        tol = case.tolerance(dtype)
        flops = case.flops(shape, dtype)
        # 1) first call of each implementation (compile, autotune, path choice) and accuracy check
        ready = []
        for name, make in impls:
            row = dict(section=section, case=case_name, shape=shape_str(shape), dtype=DTYPE_NAMES[dtype], impl=name,
                       ok="", max_err=0.0, ref=ref_kind)
            try:
                fn, note_fn = make(args)
                t = time.time()
                out = fn()
                torch.cuda.synchronize()
                first = time.time() - t
                row["note"] = ((note_fn() if note_fn else "") + f" first-call {first:.2f}s").strip()
                row["ok"], row["max_err"] = self.check(out, ref, tol, scale)
                del out
                ready.append((row, fn))
            except torch.OutOfMemoryError:
                self.record(**row, note="OOM")
            except Exception as e:
                self.record(**row, note=f"FAIL {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
                traceback.print_exc(limit=3)
            gc.collect()
            torch.cuda.empty_cache()
        # 2) timing: `rounds` passes over the implementations in rotated order, so that clock and power
        #    drift (a long GEMM heats an H200 into its power limit) does not favour whoever runs first
        meds = {id(row): [] for row, _ in ready}
        quant = {}
        for r in range(rounds):
            k = r % max(1, len(ready))
            for row, fn in ready[k:] + ready[:k]:
                if elapsed() > self.budget and meds[id(row)]:
                    continue
                try:
                    q = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS // rounds + 10,
                                                quantiles=[0.5, 0.2, 0.8])
                    meds[id(row)].append(q[0])
                    quant[id(row)] = q
                except torch.OutOfMemoryError:
                    row["note"] = "OOM"
                except Exception as e:
                    row["note"] = f"FAIL {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                gc.collect()
        for row, fn in ready:
            m = sorted(meds[id(row)])
            if m:
                med = m[len(m) // 2]
                p20, p80 = (m[0], m[-1]) if len(m) > 1 else tuple(quant[id(row)][1:])
                row.update(ms=med, ms_p20=p20, ms_p80=p80, tflops=flops / (med * 1e-3) / 1e12)
                if len(m) > 1:
                    row["note"] += f" ({len(m)} rounds, p20/p80 = min/max of round medians)"
            self.record(**row)
        del ready, args, ref
        gc.collect()
        torch.cuda.empty_cache()


def _cfg_name(c):
    short = {"BLOCK_M": "M", "BLOCK_N": "N", "BLOCK_K": "K", "BLOCK_P": "P", "GROUP_M": "G", "EPILOGUE_SUBTILE": "sub",
             "PERSISTENT": "pers"}
    kw = ",".join(f"{short.get(k, k)}{int(v) if isinstance(v, bool) else v}" for k, v in c.kwargs.items())
    return f"{kw},w{c.num_warps},s{c.num_stages}"


def cfg_str(tuner, timings=True):
    """The config the autotuner picked last, and the best few it timed (ms)."""
    c = getattr(tuner, "best_config", None)
    if c is None:
        return ""
    out = f"[{_cfg_name(c)}]"
    t = getattr(tuner, "configs_timings", None)
    if timings and t:
        def ms(v):
            return v[0] if isinstance(v, (list, tuple)) else v
        best = sorted(t.items(), key=lambda kv: ms(kv[1]))[:4]
        out += " tuned{" + "; ".join(f"{_cfg_name(k)}:{ms(v):.4f}" for k, v in best) + "}"
    return out


def plain(f):
    return lambda args: ((lambda: f(*args)), None)


def inductor_impl(fn, mode=None):
    def make(args):
        import torch
        torch._dynamo.reset()
        compiled = torch.compile(fn, dynamic=False, mode=mode)
        t = time.time()
        compiled(*args)
        torch.cuda.synchronize()
        secs = time.time() - t
        return (lambda: compiled(*args)), (lambda: f"compile {secs:.1f}s")
    return make


# ------------------------------------------------------------------------------------------------
# Sections


def matmul_impls(case, inductor):
    import torch
    import fusebench.kernels.matmul as kmm
    from fusebench.kernels.registry import KERNELS
    name = case.name
    k = KERNELS[name]
    bias = name != "matmul_relu"
    relu = name != "matmul_add"

    def variant(impl):
        def make(args):
            a, b = args[0], args[1]
            bb = args[2] if bias else None
            tuner = kmm._gemm_tma_kernel if impl == "tma" else kmm._gemm_kernel
            return (lambda: kmm.gemm(a, b, bias=bb, relu=relu, impl=impl)), (lambda: cfg_str(tuner))
        return make

    def auto(args):
        a, b = args[0], args[1]
        shape = (a.shape[0], b.shape[1], a.shape[1])
        return (lambda: k.fn(*args)), (lambda: k.describe(shape, a.dtype))

    impls = [("eager", plain(case.fn)), ("torch.mm", lambda args: ((lambda: args[0] @ args[1]), None))]
    if name == "matmul_add":
        impls.append(("cublasLt-addmm", lambda args: ((lambda: torch.addmm(args[2], args[0], args[1])), None)))
    if name == "matmul_add_relu" and hasattr(torch, "_addmm_activation"):
        impls.append(("cublasLt-addmm-relu",
                      lambda args: ((lambda: torch._addmm_activation(args[2], args[0], args[1])), None)))
    impls += [("triton", auto), ("triton-ptr", variant("ptr"))]
    from fusebench.kernels.gemm_utils import has_tensor_descriptors
    if has_tensor_descriptors():
        impls.append(("triton-tma", variant("tma")))
    if inductor:
        impls.append(("inductor", inductor_impl(case.fn)))
    return impls


def section_matmul(bench, dtypes, inductor_level):
    import torch
    from fusebench.cases.base import get_case
    for shape in MATMUL_BIG:
        for dt in dtypes:
            for name in ("matmul_add", "matmul_relu", "matmul_add_relu"):
                bench.cell("matmul", name, shape, dt, matmul_impls(get_case(name), False), rounds=ROUNDS)
    for shape in MATMUL_SMALL:
        for name in ("matmul_add", "matmul_relu", "matmul_add_relu"):
            bench.cell("matmul", name, shape, torch.float16, matmul_impls(get_case(name), False), rounds=ROUNDS)


def b2b_impls(case, inductor):
    import fusebench.kernels.matmul as kmm
    from fusebench.kernels.registry import KERNELS
    k = KERNELS["matmul_matmul"]

    def auto(args):
        a, b, c = args
        shape = (a.shape[0], b.shape[1], a.shape[1], c.shape[1])
        tuner = kmm._b2b_kernel if kmm.b2b_fused(b.shape[1]) else None
        return (lambda: k.fn(*args)), (lambda: k.describe(shape, a.dtype) + (" " + cfg_str(tuner) if tuner else ""))

    impls = [("eager", plain(case.fn)), ("triton", auto),
             ("triton-2gemm", lambda args: ((lambda: kmm.gemm(kmm.gemm(args[0], args[1]), args[2])), None))]
    if inductor:
        impls.append(("inductor", inductor_impl(case.fn)))
    return impls


def section_b2b(bench, dtypes, inductor_level):
    from fusebench.cases.base import get_case
    case = get_case("matmul_matmul")
    for shape in B2B:
        for dt in dtypes:
            bench.cell("b2b", "matmul_matmul", shape, dt, b2b_impls(case, False))


def conv_impls(case, shape, inductor):
    import torch
    import torch.nn.functional as F
    import fusebench.kernels.conv as kconv
    from fusebench.kernels.registry import KERNELS
    k = KERNELS[case.name]
    n, cin, h, w, cout, r, stride, cl = shape

    def forced(path):
        def make(args):
            def call():
                saved = kconv.CONV_PATH
                kconv.CONV_PATH = path
                try:
                    return k.fn(*args)
                finally:
                    kconv.CONV_PATH = saved
            tuner = kconv._conv_igemm_kernel if path == "igemm" else None
            return call, (lambda: cfg_str(tuner) if tuner else "")
        return make

    def auto(args):
        return (lambda: k.fn(*args)), (lambda: k.describe(shape, args[0].dtype))

    impls = [("eager", plain(case.fn)),
             ("cudnn-conv-only", lambda args: ((lambda: F.conv2d(args[0], args[1], stride=stride, padding=r // 2)),
                                               lambda: "conv without epilogue (not the case's output)"))]
    if case.name == "conv_relu" and hasattr(torch, "cudnn_convolution_relu"):
        impls.append(("cudnn-fused-relu", lambda args: (
            (lambda: torch.cudnn_convolution_relu(args[0], args[1], args[2], [stride] * 2, [r // 2] * 2, [1, 1], 1)),
            None)))
    impls += [("triton", auto), ("triton-cudnn+epi", forced("cudnn")), ("triton-igemm", forced("igemm"))]
    if r == 1 and stride == 1 and cl:
        impls.append(("triton-gemm", forced("gemm")))
    if inductor:
        impls.append(("inductor", inductor_impl(case.fn)))
    return impls


def section_conv(bench, dtypes, inductor_level):
    from fusebench.cases.base import get_case
    for layer in CONV_LAYERS:
        for cl in (1, 0):
            shape = (*layer, cl)
            for name in ("conv_add", "conv_relu", "conv_bn"):
                for dt in dtypes:
                    bench.cell("conv", name, shape, dt, conv_impls(get_case(name), shape, False))


def attn_impls(case, shape, inductor):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import fusebench.kernels.attention as katt
    from fusebench.kernels.gemm_utils import has_tensor_descriptors
    from fusebench.kernels.registry import KERNELS
    k = KERNELS["attention"]

    def sdpa(backend):
        def make(args):
            q, kk, v, causal = args

            def call():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, kk, v, is_causal=causal)
            return call, None
        return make

    def variant(impl):
        def make(args):
            tuner = katt._attn_fwd_tma if impl == "tma" else katt._attn_fwd
            return (lambda: katt.flash_attention(*args, impl=impl)), (lambda: cfg_str(tuner))
        return make

    def auto(args):
        return (lambda: k.fn(*args)), (lambda: k.describe(shape, args[0].dtype))

    impls = [("eager", plain(case.fn)), ("sdpa-flash", sdpa(SDPBackend.FLASH_ATTENTION)),
             ("sdpa-efficient", sdpa(SDPBackend.EFFICIENT_ATTENTION)), ("sdpa-cudnn", sdpa(SDPBackend.CUDNN_ATTENTION)),
             ("triton", auto), ("triton-ptr", variant("ptr"))]
    if has_tensor_descriptors():
        impls.append(("triton-tma", variant("tma")))
    if inductor:
        impls.append(("inductor", inductor_impl(case.fn)))
    return impls


def section_attention(bench, dtypes, inductor_level):
    import torch
    from fusebench.cases.base import get_case
    case = get_case("attention")
    for shape in ATTN:
        for dt in dtypes:
            if dt == torch.bfloat16 and shape[2] != 2048:
                continue  # bf16 at one sequence length only
            bench.cell("attention", "attention", shape, dt, attn_impls(case, shape, False), rounds=ROUNDS)


def section_inductor(bench, sections, level, dtypes_mm):
    """Inductor last: its compiles are the slowest part; cells in priority order until the budget ends."""
    import torch
    from fusebench.cases.base import get_case
    cells = []
    if "attention" in sections:
        cells += [("attention", "attention", s, torch.float16) for s in ATTN]
    if "matmul" in sections:
        cells += [("matmul", n, s, torch.float16) for s in MATMUL_BIG for n in ("matmul_add_relu", "matmul_add",
                                                                                   "matmul_relu")]
    if "b2b" in sections:
        cells += [("b2b", "matmul_matmul", s, torch.float16) for s in B2B]
    if "conv" in sections:
        cells += [("conv", n, (*layer, cl), torch.float16) for layer in CONV_LAYERS for cl in (1, 0)
                  for n in ("conv_bn", "conv_relu", "conv_add")]
    if "matmul" in sections and level == "all":
        cells += [("matmul", n, s, torch.bfloat16) for s in MATMUL_BIG for n in ("matmul_add_relu",)]
        cells += [("matmul", n, s, torch.float16) for s in MATMUL_SMALL for n in ("matmul_add_relu",)]
    if level == "some":
        cells = cells[:14]
    for section, name, shape, dt in cells:
        bench.cell(section, name, shape, dt, [("inductor", inductor_impl(get_case(name).fn))])


# ------------------------------------------------------------------------------------------------
# Summary tables


REFERENCE_IMPL = {"matmul": "torch.mm", "b2b": "eager", "conv": "eager", "attention": "sdpa-flash"}


def print_tables(rows):
    from collections import OrderedDict
    for section in ("matmul", "b2b", "conv", "attention"):
        sec = [r for r in rows if r["section"] == section]
        if not sec:
            continue
        impls = list(OrderedDict.fromkeys(r["impl"] for r in sec))
        cells = OrderedDict()
        for r in sec:
            cells.setdefault((r["case"], r["shape"], r["dtype"]), {})[r["impl"]] = r
        ref = REFERENCE_IMPL[section]
        print(f"\n## {section}: TFLOP/s (median, L2 flushed); '!' = failed the accuracy check; "
              f"last column: triton / {ref}")
        if section in ("matmul", "conv"):
            print("(torch.mm and cudnn-conv-only run without the epilogue: ceilings, not the case's output, "
                  "hence their '!')")
        head = ["case", "shape", "dtype"] + impls + [f"triton/{ref}"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for (case, shape, dtype), by in cells.items():
            vals = []
            for i in impls:
                r = by.get(i)
                if r is None:
                    vals.append("")
                elif r.get("tflops") is None:
                    note = r.get("note", "")
                    vals.append("skip" if note.startswith("skipped") else ("OOM" if note == "OOM" else "FAIL"))
                else:
                    vals.append(f"{r['tflops']:.1f}" + ("" if r["ok"] else "!"))
            t, b = by.get("triton"), by.get(ref)
            ratio = (f"{100 * t['tflops'] / b['tflops']:.0f}%" if t and b and t.get("tflops") and b.get("tflops")
                     else "")
            print("| " + " | ".join([case, shape, dtype] + vals + [ratio]) + " |")


# ------------------------------------------------------------------------------------------------


def main():
    global ROUNDS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default="matmul,attention,b2b,conv")
    p.add_argument("--budget", type=float, default=260.0, help="seconds; later measurements are skipped")
    p.add_argument("--jobs", type=int, default=min(14, (os.cpu_count() or 2) - 1))
    p.add_argument("--precompile-timeout", type=float, default=100.0)
    p.add_argument("--inductor", default="all", choices=["none", "some", "all"])
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--dtypes", default="fp16,bf16", help="matmul and b2b dtypes")
    args = p.parse_args()

    import torch
    import triton
    if not torch.cuda.is_available():
        print("bench/compute.py needs a CUDA GPU", file=sys.stderr)
        return 2
    torch._dynamo.config.recompile_limit = 10**6  # never fall back to eager silently
    if hasattr(torch._dynamo.config, "cache_size_limit"):
        torch._dynamo.config.cache_size_limit = 10**6
    from fusebench.cases.base import parse_dtype
    import fusebench.kernels.attention  # noqa: F401  (registers)
    import fusebench.kernels.conv  # noqa: F401
    import fusebench.kernels.matmul  # noqa: F401
    from fusebench.kernels.gemm_utils import has_tensor_descriptors

    ROUNDS = args.rounds
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    dtypes = [parse_dtype(d) for d in args.dtypes.split(",")]
    env = dict(device=torch.cuda.get_device_name(), capability=torch.cuda.get_device_capability(),
               sms=torch.cuda.get_device_properties(0).multi_processor_count, torch=torch.__version__,
               triton=triton.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
               tma=has_tensor_descriptors(), sections=sections)
    log("env", json.dumps(env))
    out_dir = os.environ.get("OUT")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "compute_env.json"), "w") as f:
            json.dump(env, f)

    names = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
    jobs = warm_jobs(sections, [names[d] for d in dtypes if d in names], ["float16", "bfloat16"])
    # longest compiles first (attention, convs), so the pool's tail is short
    order = {"attn": 0, "igemm": 1, "b2b": 2, "gemm": 3}
    jobs.sort(key=lambda j: order[j[0]])
    precompile(jobs, args.jobs, args.precompile_timeout)

    bench = Bench(args.budget, out_dir)
    runners = {"matmul": section_matmul, "b2b": section_b2b, "conv": lambda b, d, i: section_conv(b, [torch.float16], i),
               "attention": lambda b, d, i: section_attention(b, [torch.float16, torch.bfloat16], i)}
    for s in sections:
        log(f"== {s}")
        try:
            runners[s](bench, dtypes, args.inductor)
        except Exception:
            traceback.print_exc()
    if args.inductor != "none":
        log("== inductor")
        section_inductor(bench, sections, args.inductor, dtypes)
    print_tables(bench.rows)
    from fusebench.kernels.gemm_utils import fastest_records
    print("\n## implementation choices timed at first call (gemm_utils.fastest): key -> chosen {name: ms}")
    for key, (best, times) in fastest_records().items():
        shown = [str(k) for k in key if not (isinstance(k, tuple) and len(k) > 2)]
        print(f"- {' '.join(shown)} -> {best} " + ", ".join(f"{n}: {t:.4f}" for n, t in times.items()))
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
