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
