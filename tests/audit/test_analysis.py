"""Profiled kernels matched to Inductor's launches, regions ranked, catalog matches (no compile)."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from fusebench.audit.analysis import analyse, kernel_class, match_launches
from fusebench.audit.catalog import match
from fusebench.audit.profile import ProfiledKernel, outside_reason
from fusebench.fusion.capture import CompiledGraph, Launch
from fusebench.fusion.code import KernelInfo
from fusebench.fusion.graph import GraphIndex, regions, summarize

GRAPH_CALL = "## Call CompiledFxGraph None ##"


def layer(x, w, m1, m2):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    a, b = y @ m1, y @ m2
    return torch.nn.functional.silu(a) * b


def _graph():
    x, w = torch.randn(64, 128), torch.randn(128)
    m1, m2 = torch.randn(128, 256), torch.randn(128, 256)
    nodes = summarize(make_fx(layer, tracing_mode="fake")(x, w, m1, m2).graph)
    norm, act = regions(nodes)
    mm = [n.name for n in nodes if n.op == "mm"]
    launches = [Launch("cpp_fused_norm_0", [n for n in norm.nodes]), Launch("extern_kernels.mm", [mm[0]]),
                Launch("extern_kernels.mm", [mm[1]]), Launch("cpp_fused_act_1", list(act.nodes))]
    kernels = [KernelInfo("cpp_fused_norm_0", "generated", 1, ["aten.pow"]), KernelInfo("extern_kernels.mm", "extern", 2, ["aten.mm"]),
               KernelInfo("cpp_fused_act_1", "generated", 1, ["aten.silu"])]
    return CompiledGraph("forward", "", kernels, launches, nodes, [])


def _k(name, t, op=None, seq=None, key="g@1", kind="forward", ancestors=()):
    return ProfiledKernel(name, t, 0.0, t, graph_key=key, graph_kind=kind, op=op, op_seq=seq,
                          ancestors=list(ancestors) or [GRAPH_CALL])


def test_launches_match_by_name_and_by_operator_order():
    g = _graph()
    calls = [_k("cpp_fused_norm_0", 5.0), _k("gemm_a", 40.0, "aten::mm", 1), _k("gemm_b_splitk", 9.0, "aten::mm", 2),
             _k("gemm_b", 30.0, "aten::mm", 2), _k("cpp_fused_act_1", 7.0), _k("stray", 1.0)]
    matched, unexplained = match_launches(calls, g)
    assert [sum(k.time_us for k in m.kernels) for m in matched] == [5.0, 40.0, 39.0, 7.0]
    assert [k.name for k in unexplained] == ["stray"]


def test_analysis_ranks_regions_by_gap_and_names_outside_kernels():
    g = _graph()
    calls = [_k("cpp_fused_norm_0", 50.0), _k("gemm_a", 40.0, "aten::mm", 1), _k("gemm_b", 30.0, "aten::mm", 2),
             _k("cpp_fused_act_1", 7.0)]
    outside = ProfiledKernel("vectorized_add", 3.0, 0, 3, ancestors=["aten::add_", "torch::autograd::AccumulateGrad"],
                             op="aten::add_")
    a = analyse("inductor", calls + [outside], [g], step_us=200.0, copy_gbps=1.0, matmul_tflops=1.0)
    by_name = {k.name: k for k in a.kernels}
    assert by_name["extern_kernels.mm"].klass == "gemm" and by_name["extern_kernels.mm"].launches == 2
    assert by_name["extern_kernels.mm"].flops == 2 * (2 * 64 * 128 * 256)
    assert by_name["cpp_fused_norm_0"].klass == "memory" and by_name["cpp_fused_norm_0"].region == 0
    assert by_name["vectorized_add"].graph == "outside"
    assert by_name["vectorized_add"].outside == "gradient accumulation (AccumulateGrad)"
    norm, act = sorted(a.regions, key=lambda r: r.index)
    # bytes at 1 GB/s: 1 byte takes 1e-3 us
    assert norm.bytes == (64 * 128 + 128 + 64 * 128) * 4
    assert norm.ideal_us == norm.bytes * 1e-3 and norm.time_us == 50.0
    assert norm.gap_us == 50.0 - norm.ideal_us and norm.pct_step == norm.gap_us / 2.0
    assert norm.case == "rmsnorm" and norm.case_shape == "64x128" and norm.case_mode == "fwd"
    assert act.case == "swiglu" and act.case_shape == "64x256"


def test_eager_kernels_are_listed_as_they_ran():
    ks = [ProfiledKernel("ampere_sgemm", 10.0, 0, 10, op="aten::mm"), ProfiledKernel("elementwise", 2.0, 10, 12, op="aten::mul"),
          ProfiledKernel("elementwise", 2.0, 12, 14, op="aten::mul")]
    a = analyse("eager", ks, [], step_us=20.0, copy_gbps=None, matmul_tflops=None)
    assert [(k.name, k.klass, k.launches) for k in a.kernels] == [("ampere_sgemm", "gemm", 1), ("elementwise", "memory", 2)]
    assert a.regions == []


def test_kernel_classes():
    assert kernel_class(["aten.mm"], "extern_kernels.mm", kind="extern") == "gemm"
    assert kernel_class(["aten.convolution"], "x", kind="extern") == "conv"
    assert kernel_class([], "flash_fwd_kernel", "aten::_scaled_dot_product_flash_attention") == "attention"
    assert kernel_class(["aten._scaled_dot_product_flash_attention_backward"], "triton_poi_fused_transpose_0",
                        kind="generated") == "memory"
    assert kernel_class([], "Memcpy DtoD (Device -> Device)") == "copy"
    assert outside_reason(ProfiledKernel("k", 1, 0, 1, ancestors=["autograd::engine::evaluate_function: SumBackward0"])) \
        == "autograd outside the graph (SumBackward0)"


def test_catalog_leaves_unknown_regions_unmatched():
    def rope_like(x, c, s):
        return torch.cat([x[:, :16] * c - x[:, 16:] * s, x[:, 16:] * c + x[:, :16] * s], -1)

    nodes = summarize(make_fx(rope_like, tracing_mode="fake")(torch.randn(8, 32), torch.randn(8, 16), torch.randn(8, 16)).graph)
    (r,) = regions(nodes)
    assert match(r, GraphIndex(nodes), "forward") is None
