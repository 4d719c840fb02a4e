"""Numeric accuracy of an implementation's outputs against the float64 reference.

An element passes when |out - ref| <= atol * max|ref| + rtol * |ref| (allclose, with the absolute
term scaled to the output's magnitude).  NaN or inf in the output never passes.  Errors are
reduced chunk by chunk so that a float64 copy of a multi-gigabyte output is never made whole.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

CHUNK = 1 << 24  # elements per comparison chunk on a GPU (128 MiB in float64)
# On the CPU, chunks whose float64 temporaries (512 KiB) the allocator reuses: 128 MiB ones are
# mapped afresh for every operation, and their page faults were 3/4 of a comparison's time.
CPU_CHUNK = 1 << 16


@dataclass
class Accuracy:
    max_abs_err: float
    max_rel_err: float  # max|out - ref| / max|ref|
    tol_ratio: float  # worst element's error over its allowance: <= 1 passes
    nonfinite: int  # NaN/inf elements in the output where the reference is finite
    passed: bool
    detail: str = ""

    def worst(self, other: "Accuracy") -> "Accuracy":
        return self if (not self.passed, self.tol_ratio) >= (not other.passed, other.tol_ratio) else other


def flatten_outputs(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flatten_outputs(o)]
    raise TypeError(f"outputs must be tensors or tuples of tensors, got {type(out).__name__}")


def compare(out, ref, atol: float, rtol: float) -> Accuracy:
    outs, refs = flatten_outputs(out), flatten_outputs(ref)
    if len(outs) != len(refs):
        return Accuracy(float("inf"), float("inf"), float("inf"), 0, False,
                        f"{len(outs)} outputs, expected {len(refs)}")
    result = None
    for i, (o, r) in enumerate(zip(outs, refs)):
        if tuple(o.shape) != tuple(r.shape):
            return Accuracy(float("inf"), float("inf"), float("inf"), 0, False,
                            f"output {i} has shape {tuple(o.shape)}, expected {tuple(r.shape)}")
        acc = _compare_one(o, r.to(o.device), atol, rtol)
        result = acc if result is None else result.worst(acc)
    return result


def _compare_one(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> Accuracy:
    # Same logical order for both, whatever their memory layouts.
    o_flat, r_flat = out.reshape(-1), ref.reshape(-1)
    n = r_flat.numel()
    chunk = CPU_CHUNK if out.device.type == "cpu" else CHUNK
    # Masked elements count as 0 (torch.where, not boolean indexing, which copies the selection
    # and costs most of a comparison on the CPU): every error is >= 0, so a max is unchanged.
    ref_max = 0.0
    for i in range(0, n, chunk):
        r = r_flat[i:i + chunk]
        if r.numel():
            ref_max = max(ref_max, float(torch.where(torch.isfinite(r), r.abs(), 0).max()))
    max_abs, ratio, nonfinite = 0.0, 0.0, 0
    for i in range(0, n, chunk):
        o, r = o_flat[i:i + chunk].double(), r_flat[i:i + chunk].double()
        if not r.numel():
            continue
        # The usual chunk: every element finite (a finite sum proves it; an overflowing one only
        # sends the chunk down the masked path), so no masks, and the temporaries reused in place.
        o_sum, r_sum = torch.stack([o.sum(), r.sum()]).tolist()
        if math.isfinite(o_sum) and math.isfinite(r_sum):
            # o is the caller's output where it was float64 already (.double() returns it): not in place then
            owned = o.untyped_storage().data_ptr() != out.untyped_storage().data_ptr()
            diff = (o.sub_(r) if owned else o - r).abs_()
            allowance = r.abs().mul_(rtol).add_(atol * ref_max).clamp_min_(1e-300)
            chunk_abs = diff.max()
            chunk_abs, chunk_ratio = torch.stack([chunk_abs, diff.div_(allowance).max()]).tolist()
            max_abs, ratio = max(max_abs, chunk_abs), max(ratio, chunk_ratio)
            continue
        o_finite, r_finite = torch.isfinite(o), torch.isfinite(r)
        # a non-finite reference must be matched exactly (e.g. -inf stays -inf)
        bad = (~o_finite & r_finite) | (~r_finite & (o != r))
        ok = o_finite & r_finite
        diff = torch.where(ok, (o - r).abs(), 0)
        allowance = (rtol * r.abs()).add_(atol * ref_max).clamp_min_(1e-300)
        # where(ok, ...) again: a NaN reference gives a NaN allowance, and 0 / NaN is NaN
        chunk_abs, chunk_ratio, chunk_bad = torch.stack([diff.max(), torch.where(ok, diff / allowance, 0).max(),
                                                        bad.sum().double()]).tolist()
        nonfinite += int(chunk_bad)
        max_abs, ratio = max(max_abs, chunk_abs), max(ratio, chunk_ratio)
    rel = max_abs / ref_max if ref_max > 0 else (0.0 if max_abs == 0 else float("inf"))
    passed = nonfinite == 0 and ratio <= 1.0
    detail = f"{nonfinite} non-finite output element(s)" if nonfinite else ""
    return Accuracy(max_abs, rel, ratio, nonfinite, passed, detail)


# ---------------------------------------------------------------------------------------------
# The tolerance policy: which tolerance a cell is judged by, and its error beside eager's.

# TF32 keeps fp16's 10-bit mantissa, so a GEMM or convolution computed in it errs as an fp16 one
# does: fp32 cells whose GEMMs or convolutions may run in TF32 get fp16's default tolerance (or
# the case's own where that is looser).
TF32_TOLERANCE = (2e-3, 1e-2)
# Every implementation is also held against eager's own error on the same inputs: its worst
# relative error over eager's (err_vs_eager).  Within this factor it is as accurate as PyTorch
# (a fused kernel sums in another order); beyond it the cell is flagged "less accurate than eager".
BASELINE_ERROR_FACTOR = 4.0
# Functions and operators (by name) that are GEMMs: those whose fp32 PyTorch may run in TF32,
# with convolutions (any name with "conv" in it).
GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "_scaled_mm",
                      "_int_mm", "matmul", "__matmul__", "__rmatmul__", "linear", "bilinear", "einsum", "tensordot",
                      "inner", "chain_matmul", "multi_dot", "multi_head_attention_forward"})


def op_kind(name: str) -> str | None:
    """"gemm", "conv" or None for a torch function's or ATen operator's name."""
    if name in GEMM_OPS or "scaled_dot_product" in name or name.startswith(("_efficient_attention",
                                                                            "_flash_attention")):
        return "gemm"
    if "conv" in name and not name.startswith("convert"):
        return "conv"
    return None


def heavy_ops(fn, args: tuple) -> frozenset[str]:
    """Which of "gemm" and "conv" `fn(*args)` computes, seen at the level of torch's functions: on
    meta tensors (nothing is computed), else, where meta tensors cannot run it (an output whose
    shape depends on the data), on the inputs themselves."""
    from torch.overrides import TorchFunctionMode

    found: set[str] = set()

    class Seen(TorchFunctionMode):
        def __torch_function__(self, func, types, fargs=(), kwargs=None):
            kind = op_kind(getattr(func, "__name__", ""))
            if kind:
                found.add(kind)
            return func(*fargs, **(kwargs or {}))

    try:
        meta = tuple(a.detach().to("meta") if isinstance(a, torch.Tensor) else a for a in args)
        with Seen(), torch.no_grad():
            fn(*meta)
    except Exception:
        found.clear()
        with Seen(), torch.no_grad():
            fn(*args)
    return frozenset(found)


def tf32_switches() -> dict:
    """PyTorch's switches that let fp32 GEMMs and convolutions run in TF32, as they are now."""
    return {"matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


@dataclass(frozen=True)
class Tolerance:
    """The tolerance a cell is judged by, which policy chose it, and the note that says so."""

    atol: float
    rtol: float
    grad: tuple[float, float]  # the gradients' (training modes)
    kind: str  # "tf32", or the dtype's name ("fp32", "fp16", "bf16"): the case's own
    note: str = ""


def _names(ops) -> str:
    return " and ".join(w for k, w in (("gemm", "GEMMs"), ("conv", "convolutions")) if k in ops)


def _tf32_why(ops, device: str, note: str, switches: dict, capability) -> tuple[str | None, str]:
    """(why TF32 may apply, or None; why it does not, where it does not)."""
    if "tf32" in (note or "").lower():
        return "the implementation computes its fp32 dots in TF32 (its note says so)", ""
    if not device.startswith("cuda"):
        return None, "no TF32 on the CPU"
    if capability is not None and tuple(capability) < (8, 0):
        return None, f"this GPU has no TF32 (compute capability {capability[0]}.{capability[1]})"
    why, off = [], []
    if "conv" in ops:
        (why if switches.get("cudnn_allow_tf32") else off).append(
            f"torch.backends.cudnn.allow_tf32={bool(switches.get('cudnn_allow_tf32'))}"
            + (" (PyTorch's default)" if switches.get("cudnn_allow_tf32") else ""))
    if "gemm" in ops:
        gemm_tf32 = switches.get("matmul_allow_tf32") or switches.get("float32_matmul_precision") in ("high", "medium")
        (why if gemm_tf32 else off).append(
            f"torch.backends.cuda.matmul.allow_tf32={bool(switches.get('matmul_allow_tf32'))}, "
            f"float32_matmul_precision '{switches.get('float32_matmul_precision')}'")
    if why:
        return f"its {_names(ops)} may run in TF32 here ({'; '.join(why)})", ""
    return None, f"TF32 is off ({'; '.join(off)})"


def tolerance_policy(tol: tuple[float, float], grad_tol: tuple[float, float], dtype: torch.dtype, device: str,
                     ops=frozenset(), note: str = "", switches: dict | None = None,
                     capability=None) -> Tolerance:
    """The tolerance of a cell: the case's own for its dtype, or, for an fp32 cell whose GEMMs or
    convolutions may run in TF32 here (PyTorch's switches in this process, a GPU with TF32, or an
    implementation that says it computes in TF32), TF32_TOLERANCE where the case's is tighter.
    `ops`: heavy_ops of the case's function.  The note names the tolerance and why."""
    name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype, str(dtype))
    if dtype != torch.float32 or not (ops or "tf32" in (note or "").lower()):
        return Tolerance(*tol, grad=tuple(grad_tol), kind=name)
    if device.startswith("cuda") and capability is None:
        capability = torch.cuda.get_device_capability(device)
    yes, no = _tf32_why(ops, device, note, tf32_switches() if switches is None else switches, capability)
    if yes is None:
        return Tolerance(*tol, grad=tuple(grad_tol), kind=name,
                         note=f"fp32 tolerance (atol {tol[0]:g}, rtol {tol[1]:g}): its {_names(ops) or 'dots'} "
                              f"run in full fp32 here ({no})")
    atol, rtol = max(tol[0], TF32_TOLERANCE[0]), max(tol[1], TF32_TOLERANCE[1])
    grad = (max(grad_tol[0], TF32_TOLERANCE[0]), max(grad_tol[1], TF32_TOLERANCE[1]))
    if (atol, rtol) == tuple(tol):
        text = f"tolerance atol {atol:g}, rtol {rtol:g} (the case's own, which allows TF32): {yes}"
    else:
        text = (f"TF32 tolerance (atol {atol:g}, rtol {rtol:g}) instead of fp32's (atol {tol[0]:g}, "
                f"rtol {tol[1]:g}): {yes}")
    return Tolerance(atol, rtol, grad=grad, kind="tf32", note=text)


def error_vs_baseline(rel_err: float | None, baseline_rel_err: float | None, dtype: torch.dtype) -> float | None:
    """An implementation's worst relative error over eager's on the same inputs, eager's floored at
    the dtype's epsilon (an exact eager makes no error to divide by); None where either is unknown."""
    if rel_err is None or baseline_rel_err is None or not math.isfinite(baseline_rel_err):
        return None
    if not math.isfinite(rel_err):
        return float("inf")
    return rel_err / max(baseline_rel_err, torch.finfo(dtype).eps)
