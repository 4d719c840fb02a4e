"""Numeric accuracy of an implementation's outputs against the float64 reference.

An element passes when |out - ref| <= atol * max|ref| + rtol * |ref| (allclose, with the absolute
term scaled to the output's magnitude).  NaN or inf in the output never passes.  Errors are
reduced chunk by chunk so that a float64 copy of a multi-gigabyte output is never made whole.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

CHUNK = 1 << 24  # elements per comparison chunk (128 MiB in float64)


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
    ref_max = 0.0
    for i in range(0, n, CHUNK):
        r = r_flat[i:i + CHUNK]
        finite = r[torch.isfinite(r)]
        if finite.numel():
            ref_max = max(ref_max, float(finite.abs().max()))
    max_abs, ratio, nonfinite = 0.0, 0.0, 0
    for i in range(0, n, CHUNK):
        o, r = o_flat[i:i + CHUNK].double(), r_flat[i:i + CHUNK].double()
        bad = ~torch.isfinite(o) & torch.isfinite(r)
        # a non-finite reference must be matched exactly (e.g. -inf stays -inf)
        bad |= ~torch.isfinite(r) & (o != r)
        nonfinite += int(bad.sum())
        ok = torch.isfinite(o) & torch.isfinite(r)
        diff = (o - r).abs()[ok]
        if diff.numel():
            max_abs = max(max_abs, float(diff.max()))
            allowance = atol * ref_max + rtol * r[ok].abs()
            ratio = max(ratio, float((diff / allowance.clamp_min(1e-300)).max()))
    rel = max_abs / ref_max if ref_max > 0 else (0.0 if max_abs == 0 else float("inf"))
    passed = nonfinite == 0 and ratio <= 1.0
    detail = f"{nonfinite} non-finite output element(s)" if nonfinite else ""
    return Accuracy(max_abs, rel, ratio, nonfinite, passed, detail)
