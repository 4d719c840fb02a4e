"""Shared by the tests of the memory-bound kernels: inputs, the reference check, layouts.

Without a GPU the kernels run under Triton's interpreter (TRITON_INTERPRET=1, set by
tests/conftest.py before any kernel module is imported), at small odd shapes.  Outputs are
compared with the case's float64 reference under the case's tolerance:
|out - ref| <= atol * max|ref| + rtol * |ref|.
"""
import os

import pytest
import torch

from fusebench.cases.base import get_case
from fusebench.kernels import launch_plans
from fusebench.measure.timing import TimingSettings
import fusebench.kernels.horizontal as khor
import fusebench.kernels.norms as knorm
import fusebench.kernels.pointwise as kpw
import fusebench.kernels.softmax as ksm

ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
DEVICE = "cuda" if ON_GPU else "cpu"
gpu = pytest.mark.gpu

ELEMENTWISE = ["pointwise_chain", "bias_gelu", "bias_dropout_add", "bias_dropout_add_transposed"]


TWO_PASS = ["softmax", "double_softmax", "softmax_backward", "layernorm", "norm_chain"]
HORIZONTAL = ["horizontal_reduction_pointwise", "horizontal_reduction_reduction"]
ROWWISE = TWO_PASS + HORIZONTAL


ALL = ELEMENTWISE + ROWWISE


IMPL = {
    "softmax": ksm.softmax_impl,
    "double_softmax": ksm.double_softmax_impl,
    "softmax_backward": ksm.softmax_backward_impl,
    "layernorm": knorm.layernorm_impl,
    "norm_chain": knorm.norm_chain_impl,
    "horizontal_reduction_pointwise": khor.horizontal_reduction_pointwise_impl,
    "horizontal_reduction_reduction": khor.horizontal_reduction_reduction_impl,
    "pointwise_chain": kpw.pointwise_chain_impl,
    "bias_gelu": kpw.bias_gelu_impl,
    "bias_dropout_add": kpw.bias_dropout_add_impl,
    "bias_dropout_add_transposed": kpw.bias_dropout_add_transposed_impl,
}


def check(case_name, out, args):
    case = get_case(case_name)
    dtype = args[0].dtype
    ref = case.run_reference(args)
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    assert len(outs) == len(refs)
    atol, rtol = case.tolerance(dtype)
    for o, r in zip(outs, refs):
        assert o.shape == r.shape, (o.shape, r.shape)
        assert o.dtype == dtype, (o.dtype, dtype)
        o64, r = o.double().cpu(), r.cpu()
        assert torch.isfinite(o64).all(), "NaN or inf in the output"
        err = (o64 - r).abs()
        bad = err > atol * r.abs().max() + rtol * r.abs()
        assert not bad.any(), (f"{case_name}: {int(bad.sum())} of {bad.numel()} elements out of tolerance, "
                               f"max err {err.max().item():.3e}")


def inputs(case_name, shape, dtype, seed=0):
    return get_case(case_name).make_inputs(shape, dtype, DEVICE, seed)


def strided(t: torch.Tensor, how: str) -> torch.Tensor:
    """The same values in a non-contiguous layout: `rows` pads every row (row stride > N),
    `cols` stores the tensor column-major (column stride > 1, row stride 1)."""
    if t.dim() != 2:
        return t
    if how == "rows":
        wide = torch.full((t.shape[0], t.shape[1] + 13), float("nan"), dtype=t.dtype, device=t.device)
        wide[:, : t.shape[1]] = t
        return wide[:, : t.shape[1]]
    return t.t().contiguous().t()


def check_plan(name, plan, dtype, shape=(3, 700), seed=1):
    """The case's kernel forced onto `plan` at `shape` agrees with the reference."""
    args = inputs(name, shape, dtype, seed=seed)
    check(name, IMPL[name](*args, plan=plan), args)


def checked(name, out, args, plan):
    """check(), naming the plan when it fails."""
    try:
        check(name, out, args)
    except AssertionError as exc:
        raise AssertionError(f"{plan.describe()}: {exc}") from None


# Looped plans forced at small sizes (3 rows of 700 columns)
LONG_PLANS = {
    "loop": launch_plans.loop_plan(64, 4),
    "loop_capped": launch_plans.loop_plan(64, 4, grid=2),  # fewer programs than rows: each takes several
    "loop_pipelined": launch_plans.loop_plan(64, 4, grid=2, stages=3),  # tl.range(num_stages=3) passes
    "loop_prefetched": launch_plans.loop_plan(64, 4, grid=2, stages=1),  # next step's loads issued early, in registers
    "loop_one_step": launch_plans.loop_plan(1024, 4),  # each pass one (masked) step over the whole row
}


def fresh_launchers() -> list:
    """The launcher caches of the row-wise, element-wise and horizontal kernels (launch.STATE's,
    in that order), emptied."""
    from fusebench.kernels.launch import STATE

    caches = [STATE.launchers(family) for family in ("rowwise", "pointwise", "horizontal")]
    for cache in caches:
        cache.clear()
    return caches


# ----------------------------------------------------------------------------------------------
# the training kernels' checks

# A cell's timing cut to a few repetitions: the training tests check gradients, not time.
FAST_TIMING = TimingSettings(warmup_ms=1, rep_ms=2, min_reps=2, max_reps=3)


def close(got, want, tol=2e-5):
    """|got - want| <= tol, relative to max(1, max|want|)."""
    err = (got.double() - want).abs().max().item()
    assert err <= tol * max(1.0, want.abs().max().item()), err


def grads(fn, inputs, dy):
    """(outputs as a tuple, each input's gradient): fn on fresh leaves, backward with `dy` (one
    gradient per output)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    torch.autograd.backward(outs, dy)
    return outs, [t.grad for t in leaves]
