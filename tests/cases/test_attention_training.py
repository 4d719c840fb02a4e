"""attention in the training modes: backward models, gradients checked on the (batch, head)
sample, and a wrong gradient in a sampled slice failing the cell."""
import dataclasses

import pytest
import torch

from fusebench import catalog
from fusebench.cases import get_case
from fusebench.cases.mix import attention
from fusebench.impls.user import UserImplementation
from fusebench.measure.timing import TimingSettings
from fusebench.runner.cell import measure_cell
from fusebench.runner.mode_call import ModeCall
from fusebench.runner.plan import Cell

FAST = TimingSettings(warmup_ms=1, rep_ms=2, min_reps=2, max_reps=3)
SAMPLED = (2, 3, 33, 8, 1)  # 6 (batch, head) slices: 4 of them checked
WHOLE = (1, 2, 17, 8, 0)  # 2 slices: all checked


def test_backward_models():
    case, fp16 = get_case("attention"), torch.float16
    s = (2, 4, 128, 64, 0)
    assert case.backward_bytes_model(s, fp16) == 8 * 2 * 4 * 128 * 64 * 2 + 4 * 2 * 4 * 128
    assert case.backward_flops_model(s, fp16) == 5 * case.flops(s, fp16) // 2
    causal = s[:4] + (1,)
    assert case.backward_flops_model(causal, fp16) == case.backward_flops_model(s, fp16) // 2
    assert case.grad_inputs == (0, 1, 2)


@pytest.mark.parametrize("mode", ["bwd", "fwd_bwd"])
@pytest.mark.parametrize("shape", [SAMPLED, WHOLE])
def test_eager_cells(mode, shape):
    row = measure_cell(Cell("attention", "eager", shape, "fp32", "cpu", mode), FAST)
    assert row["status"] == "ok", row.get("reason")
    assert row["seeds"] == 3 and row["tol_ratio"] <= 1
    if shape == SAMPLED:
        assert "accuracy checked on a sample of the output" in row["note"]


def test_inductor_cell():
    row = measure_cell(Cell("attention", "inductor", SAMPLED, "fp32", "cpu", "fwd_bwd"), FAST)
    assert row["status"] == "ok", row.get("reason")


def test_sampled_reference_is_the_whole_reference_cut():
    # The sample's reference gradients (given the sample's output gradients) are the whole
    # problem's reference gradients, cut: the output gradients were cut consistently.
    case = get_case("attention")
    args = case.make_inputs(SAMPLED, torch.float32, "cpu", 5)
    (out, grads), (ref_out, ref_grads) = ModeCall(attention, case, "fwd_bwd").checked_and_reference(args, 5)
    whole = ModeCall(attention, dataclasses.replace(case, reference_subset=None), "fwd_bwd")
    (w_out, w_grads), (wr_out, wr_grads) = whole.checked_and_reference(args, 5)

    def cut(t):
        return case.reference_subset(args, t)[1]

    assert out.shape[0] == 4
    torch.testing.assert_close(ref_out, cut(wr_out))
    for g, r, wg, wr in zip(grads, ref_grads, w_grads, wr_grads):
        torch.testing.assert_close(g, cut(wg))
        torch.testing.assert_close(r, cut(wr))


class _CorruptK(torch.autograd.Function):
    """Identity forward; the backward spoils the gradient of the last (batch, head) slice."""

    @staticmethod
    def forward(ctx, k):
        return k.view_as(k)

    @staticmethod
    def backward(ctx, dk):
        dk = dk.clone()
        dk[-1, -1] += 1.0
        return dk


@pytest.mark.slow
def test_a_wrong_gradient_in_a_sampled_slice_fails_the_cell():
    impl = UserImplementation("attn-bad-dk", lambda q, k, v, c: attention(q, _CorruptK.apply(k), v, c),
                              ("attention",))
    catalog.load().add("impls", impl.name, impl)
    try:
        row = measure_cell(Cell("attention", impl.name, SAMPLED, "fp32", "cpu", "fwd_bwd"), FAST)
        fwd = measure_cell(Cell("attention", impl.name, SAMPLED, "fp32", "cpu", "fwd"), FAST)
    finally:
        catalog.CATALOG.impls.pop(impl.name)
    assert row["status"] == "mismatch" and "gradient of input 1" in row["reason"]
    assert fwd["status"] == "ok"  # the forward is right
