"""launch.STATE: the kernel layer's one state object.  The families' launchers and per-problem
tables live there, STATE.clear() empties them all, and a setting changed at run time
(settings.refresh) decides the next call without a reimport."""
import pytest
import torch

from fusebench import settings
from fusebench.cases.base import get_case
from fusebench.kernels import KERNELS
from fusebench.kernels.launch import STATE, KernelState, LauncherCache
import fusebench.kernels.attention as katt
import fusebench.kernels.matmul as kmm
from compute_checks import spy

# case -> (CPU shape, the STATE entry its call fills)
_FILLS = {
    "softmax": ((5, 70), "launchers:rowwise"),
    "bias_gelu": ((5, 70), "launchers:pointwise"),
    "horizontal_reduction_reduction": ((5, 70), "launchers:horizontal"),
    "swiglu": ((5, 70), "launchers:swiglu"),
    "cross_entropy": ((5, 70), "launchers:cross_entropy"),
    "matmul_add": ((16, 8, 12), "matmul.plans"),
    "matmul_matmul": ((16, 8, 12, 8), "b2b.plans"),
    "attention": ((1, 1, 16, 16, 0), "attention.plans"),
}


def _call(name, seed=0):
    shape, _ = _FILLS[name]
    args = get_case(name).make_inputs(shape, torch.float32, "cpu", seed)
    return KERNELS[name].fn(*args)


@pytest.mark.interpreter
def test_calls_fill_the_state_and_clear_empties_every_cache():
    STATE.clear()
    assert set(STATE.sizes().values()) == {0}
    for name, (_, entry) in _FILLS.items():
        _call(name)
        assert STATE.sizes()[entry] >= 1, (name, STATE.sizes())
    STATE.clear()
    sizes = STATE.sizes()
    assert {entry for _, entry in _FILLS.values()} <= set(sizes) and set(sizes.values()) == {0}, sizes
    _call("softmax", seed=1)  # the family's cache is the same object, filled again
    assert STATE.sizes()["launchers:rowwise"] == 1


def test_a_launcher_is_kept_only_where_its_build_says_final():
    cache = LauncherCache("test")
    assert cache.miss("k", lambda x: (x, False), "guess") == "guess" and cache.get("k") is None
    assert cache.miss("k", lambda x: (x, True), "chosen") == "chosen" and cache.get("k") == "chosen"
    cache.clear()
    assert cache.get("k") is None and len(cache) == 0  # `get` still looks into the emptied entries


def test_caches_and_tables_are_made_once_and_cleared_in_place():
    state = KernelState()
    cache, table = state.launchers("a"), state.table("b")
    cache.miss("k", lambda: (1, True))
    table["k"] = 2
    assert state.launchers("a") is cache and state.table("b") is table
    assert state.sizes() == {"launchers:a": 1, "b": 1}
    state.clear()
    assert state.launchers("a") is cache and state.table("b") is table and state.sizes() == {"launchers:a": 0, "b": 0}


def _gemm_operands(seed=0):
    g = torch.Generator().manual_seed(seed)
    a, b, bias = torch.randn(16, 300, generator=g), torch.randn(300, 8, generator=g), torch.randn(8, generator=g)
    return a, b, bias, a @ b + bias


@pytest.mark.interpreter
def test_a_changed_gemm_setting_decides_the_next_call(monkeypatch):
    # the same operands, a plan for each setting: the setting is read at the call, not at import
    ptr, splitk = spy(monkeypatch, kmm, "_ptr_plan"), spy(monkeypatch, kmm, "_splitk_plan")
    a, b, bias, want = _gemm_operands()
    monkeypatch.setenv("FUSEBENCH_GEMM_IMPL", "ptr")
    settings.refresh()
    torch.testing.assert_close(kmm.gemm(a, b, bias=bias), want, rtol=1e-4, atol=1e-4)
    monkeypatch.setenv("FUSEBENCH_GEMM_IMPL", "splitk")
    settings.refresh()
    torch.testing.assert_close(kmm.gemm(a, b, bias=bias), want, rtol=1e-4, atol=1e-4)
    assert (len(ptr), len(splitk)) == (1, 1)
    assert "split-K" in KERNELS["matmul_add"].describe((16, 8, 300), torch.float16)
    monkeypatch.setenv("FUSEBENCH_GEMM_IMPL", "ptr")
    settings.refresh()
    kmm.gemm(a, b, bias=bias)  # back: the first setting's plan, kept under its key
    assert (len(ptr), len(splitk)) == (1, 1)


@pytest.mark.interpreter
def test_a_changed_attention_setting_decides_the_next_call(monkeypatch):
    builds = spy(monkeypatch, katt, "_first_call")
    q, k, v = (torch.randn(1, 1, 16, 16) for _ in range(3))
    for impl in ("ptr", "tma"):
        monkeypatch.setenv("FUSEBENCH_ATTN_IMPL", impl)
        settings.refresh()
        katt.flash_attention(q, k, v, False)
        katt.flash_attention(q, k, v, False)
    assert len(builds) == 2  # one plan per setting, each made at its setting's first call
    monkeypatch.setenv("FUSEBENCH_ATTN_IMPL", "ptr")
    settings.refresh()
    assert "pointer loads" in KERNELS["attention"].describe((1, 1, 16, 16, 0), torch.float16)


@pytest.mark.interpreter
def test_a_changed_coop_setting_is_part_of_the_norm_backwards_key(monkeypatch):
    from fusebench.kernels import layernorm_backward as klnb

    plans = STATE.table("layernorm_backward.plans")
    plans.clear()
    x, dy, w = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)
    for coop in ("1", "0", "1"):
        monkeypatch.setenv("FUSEBENCH_COOP", coop)
        settings.refresh()
        klnb.norm_backward(dy, x, w, center=True, eps=1e-5)
    assert len(plans) == 2  # one plan per setting, the first kept under its key
    plans.clear()
