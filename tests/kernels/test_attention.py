"""The attention kernels."""
import pytest
import torch

from fusebench import settings
from fusebench.cases.base import get_case
import fusebench.kernels.attention as katt
from compute_checks import DEVICE, DTYPES, gpu, needs_gpu, run_case, run_twice, spy


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16"])
@pytest.mark.parametrize("shape", [(1, 2, 67, 16), (2, 1, 16, 32), (1, 1, 5, 16), (1, 1, 48, 64)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [0, 1], ids=["full", "causal"])
def test_attention(shape, causal, dtype):
    run_case("attention", (*shape, causal), dtype)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_strided_inputs(causal):
    # (batch, seq, heads, dim) storage seen as (batch, heads, seq, dim), as after a QKV projection
    g = torch.Generator(device=DEVICE).manual_seed(1)
    q, k, v = (torch.randn(2, 37, 3, 16, generator=g, device=DEVICE).to(torch.float16).transpose(1, 2)
               for _ in range(3))
    out = katt.attention(q, k, v, causal)
    ref = get_case("attention").run_reference((q, k, v, causal))
    err = (out.double() - ref).abs()
    assert (err <= 4e-3 * ref.abs().max() + 2e-2 * ref.abs()).all(), err.max()


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("impl", ["ptr", "tma"])
def test_gpu_attention(dtype, impl, monkeypatch, few_configs):
    monkeypatch.setenv("FUSEBENCH_ATTN_IMPL", impl)
    settings.refresh()
    for shape in [(2, 4, 1000, 64), (1, 2, 300, 128), (1, 2, 2048, 128)]:
        for causal in (0, 1):
            run_case("attention", (*shape, causal), dtype)


def test_second_call_takes_the_plan(monkeypatch):
    katt._PLANS.clear()
    builds = spy(monkeypatch, katt, "_first_call")
    tuner = spy(monkeypatch, katt._attn_fwd, "run")
    run_twice("attention", (1, 2, 40, 16, 1), torch.float32)
    assert (len(builds), len(tuner)) == (1, 1)
    run_case("attention", (1, 2, 40, 16, 0), torch.float32)  # causal is part of the key
    assert (len(builds), len(tuner)) == (2, 2)


@gpu
@needs_gpu
@pytest.mark.parametrize("impl", ["ptr", "tma"])
def test_gpu_attention_plans_on_fresh_tensors(impl, monkeypatch, few_configs):
    monkeypatch.setenv("FUSEBENCH_ATTN_IMPL", impl)
    settings.refresh()
    katt._PLANS.clear()
    for shape in [(2, 4, 1000, 64, 0), (1, 2, 2048, 128, 1)]:
        a, b = run_twice("attention", shape, torch.float16)
        assert not torch.equal(a, b)
