"""The attention backward kernels (attention_backward.py) and the forward's logsumexp: under Triton's
interpreter at tiny odd shapes against float64 autograd of the case's formula, and the `triton`
implementation's cells in the training modes through the runner."""
import math

import pytest
import torch

from fusebench.cases import get_case
from fusebench.cases.mix import attention as attention_formula
from fusebench.impls.base import get_impl
from fusebench.kernels import attention as katt
from fusebench.kernels import attention_backward as kab
from fusebench.measure.timing import TimingSettings
from fusebench.runner.cell import measure_cell
from fusebench.runner.modes import applies_in
from fusebench.runner.plan import Cell, plan_cells
from compute_checks import DEVICE, gpu, needs_gpu, spy

FAST = TimingSettings(warmup_ms=1, rep_ms=2, min_reps=2, max_reps=3)


def _inputs(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g).to(device=DEVICE, dtype=dtype) for _ in range(4)]  # q, k, v, dO


def _grads(fn, q, k, v, do, causal):
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out = fn(*leaves, causal)
    out.backward(do)
    return out, [t.grad for t in leaves]


def _check(q, k, v, do, causal, tol):
    """Our output and (dq, dk, dv) against float64 autograd of the case's formula."""
    out, grads = _grads(kab.attention, q, k, v, do, causal)
    ref, ref_grads = _grads(attention_formula, q.double(), k.double(), v.double(), do.double(), causal)
    for name, got, want in zip(("out", "dq", "dk", "dv"), (out, *grads), (ref, *ref_grads)):
        assert got.dtype == q.dtype and got.shape == want.shape, name
        err = (got.double() - want).abs().max().item()
        assert err <= tol * max(1.0, want.abs().max().item()), (name, err)


@pytest.mark.parametrize("shape", [(1, 2, 37, 16), (2, 1, 16, 32), (1, 1, 5, 16), (1, 1, 50, 32)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gradients(shape, causal):
    _check(*_inputs(shape, seed=sum(shape)), causal, tol=2e-5)


@pytest.fixture
def unequal_blocks(monkeypatch):
    # key blocks twice the query blocks in dK/dV, query blocks twice the key blocks in dQ: the
    # diagonal then spans two steps of each loop (the interpreter's own config has them equal)
    monkeypatch.setattr(kab._bwd_dkdv, "configs", [kab.Blocks(16, 32, 4, 1).config()])
    monkeypatch.setattr(kab._bwd_dq, "configs", [kab.Blocks(32, 16, 4, 1).config()])
    kab._PLANS.clear()
    yield
    kab._PLANS.clear()  # the plans of these configs end with the test


@pytest.mark.parametrize("seqlen", [37, 64])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gradients_with_unequal_blocks(unequal_blocks, seqlen, causal):
    _check(*_inputs((1, 2, seqlen, 16), seed=seqlen), causal, tol=2e-5)


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_strided_inputs_and_output_gradient(causal):
    # (batch, seq, heads, dim) storage seen as (batch, heads, seq, dim), as after a QKV projection
    q, k, v, do = (t.reshape(2, 3, 37, 16).transpose(1, 2) for t in _inputs((2, 37, 3, 16), seed=3))
    assert not q.is_contiguous() and not do.is_contiguous()
    _check(q, k, v, do, causal, tol=2e-5)


def test_fp16():
    q, k, v, do = _inputs((1, 2, 37, 32), torch.float16, seed=4)
    _check(q, k, v, do, True, tol=2e-2)


@pytest.mark.interpreter
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_forward_logsumexp(causal):
    q, k, v, _ = _inputs((1, 2, 37, 16), seed=5)
    out, lse = katt.flash_attention(q, k, v, causal, with_lse=True)
    scores = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(16)
    if causal:
        scores = scores.masked_fill(torch.ones(37, 37, dtype=torch.bool).triu(1), float("-inf"))
    assert lse.dtype == torch.float32 and lse.shape == (1, 2, 37) and lse.is_contiguous()
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores, -1), rtol=0, atol=1e-5)
    # the same output as without the logsumexp
    torch.testing.assert_close(out, katt.flash_attention(q, k, v, causal), rtol=0, atol=0)


def test_a_wrong_dv_fails_the_check(monkeypatch):
    real = kab.attention_backward

    def wrong(*args):
        dq, dk, dv = real(*args)
        dv = dv.clone()
        dv[0, 1, 36, 3] += 1e-3  # one element of the partial last block
        return dq, dk, dv

    monkeypatch.setattr(kab, "attention_backward", wrong)
    with pytest.raises(AssertionError, match="dv"):
        _check(*_inputs((1, 2, 37, 16), seed=6), True, tol=2e-5)


def test_second_call_takes_the_plan(monkeypatch):
    kab._PLANS.clear()
    builds = spy(monkeypatch, kab, "_first_call")
    q, k, v, do = _inputs((1, 2, 20, 16), seed=7)
    first = _grads(kab.attention, q, k, v, do, True)[1]
    second = _grads(kab.attention, q, k, v, do, True)[1]
    assert len(builds) == 1
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    _grads(kab.attention, q, k, v, do, False)  # causal is part of the key
    assert len(builds) == 2


# ------------------------------------------------------------------------------------------------
# the runner


@pytest.mark.parametrize("mode", ["bwd", "fwd_bwd"])
def test_triton_is_planned_in_training_modes(mode):
    assert applies_in(get_impl("triton"), get_case("attention"), mode)
    cells = plan_cells(["attention"], ["triton"], "1x2x33x16x1", "fp32", "cpu", mode)
    assert [(c.impl, c.mode) for c in cells] == [("triton", mode)]


@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.parametrize("mode", ["bwd", "fwd_bwd"])
def test_triton_cells(mode):
    # 6 (batch, head) slices, 4 of them checked (the case's sample), causal, seqlen not a block multiple
    row = measure_cell(Cell("attention", "triton", (2, 3, 33, 16, 1), "fp32", "cpu", mode), FAST)
    assert row["status"] == "ok", row.get("reason")
    assert row["seeds"] == 3 and row["tol_ratio"] <= 1


@pytest.mark.interpreter
def test_a_wrong_dv_fails_the_cell(monkeypatch):
    real = kab.attention_backward

    def wrong(*args):
        dq, dk, dv = real(*args)
        dv = dv.clone()
        dv[-1, -1, -1] += 0.5  # the last key of the last (batch, head): the partial last block
        return dq, dk, dv

    monkeypatch.setattr(kab, "attention_backward", wrong)
    row = measure_cell(Cell("attention", "triton", (1, 2, 17, 16, 0), "fp32", "cpu", "fwd_bwd"), FAST)
    assert row["status"] == "mismatch" and "gradient of input 2" in row["reason"]


# ------------------------------------------------------------------------------------------------
# GPU: the tuned configs, fp16 and bf16, head_dim 64 and 128 (the case's), causal or not


@pytest.fixture
def two_configs(monkeypatch):
    # the first and last config of each space cover the code paths with two compiles each
    for tuner in (kab._bwd_dkdv, kab._bwd_dq, katt._attn_fwd, katt._attn_fwd_tma):
        if len(tuner.configs) > 2:
            monkeypatch.setattr(tuner, "configs", [tuner.configs[0], tuner.configs[-1]])


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("shape", [(2, 4, 1000, 64), (1, 2, 300, 128), (1, 2, 2048, 128)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_gradients(two_configs, dtype, shape, causal):
    case = get_case("attention")
    atol, rtol = case.grad_tolerances[dtype]
    q, k, v, do = _inputs(shape, dtype, seed=1)
    out, grads = _grads(kab.attention, q, k, v, do, causal)
    _, refs = _grads(attention_formula, q.double(), k.double(), v.double(), do.double(), causal)
    for name, got, want in zip(("dq", "dk", "dv"), grads, refs):
        err = (got.double() - want).abs()
        bound = atol * want.abs().max() + rtol * want.abs()
        assert torch.isfinite(got).all() and (err <= bound).all(), (name, err.max().item())


@gpu
@needs_gpu
@pytest.mark.parametrize("mode", ["bwd", "fwd_bwd"])
def test_gpu_cells(two_configs, mode):
    row = measure_cell(Cell("attention", "triton", (2, 8, 1024, 128, 1), "fp16", "cuda", mode), FAST)
    assert row["status"] == "ok", row.get("reason")
