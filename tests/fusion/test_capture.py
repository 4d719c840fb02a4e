"""What Inductor's output code and compile say about its kernels (CPU: Inductor's C++ backend)."""
import pytest
import torch

from fusebench.fusion.capture import InductorCapture, launches_from_code, refusals_from_log
from fusebench.fusion.code import graph_kind, ops_from_name, parse_output_code

GPU_CODE = '''# AOT ID: ['3_backward']
# kernel path: /tmp/x.py
# Topologically Sorted Source Nodes: [pow_1, mean, rsqrt], Original ATen: [aten.pow, aten.mean, aten.rsqrt]
triton_red_fused_mean_pow_rsqrt_0 = async_compile.triton('triton_red_fused_mean_pow_rsqrt_0', \'\'\'
@triton_heuristics.reduction(inductor_meta={'kernel_name': 'x', 'kernel_num_gb': 0.0042, 'kernel_flop': 0})
@triton.jit
def triton_red_fused_mean_pow_rsqrt_0(in_ptr0, out_ptr0):
    extern_kernels.mm(fake)
\'\'\', device_str='cuda')
triton_poi_fused_mul_silu_1 = async_compile.triton('triton_poi_fused_mul_silu_1', \'\'\'x\'\'\', device_str='cuda')
def call(args):
    # Topologically Sorted Source Nodes: [pow_1, mean, rsqrt], Original ATen: [aten.pow, aten.mean, aten.rsqrt]
    # [Provenance debug handles] triton_red_fused_mean_pow_rsqrt_0:1
    triton_red_fused_mean_pow_rsqrt_0.run(buf0, buf1, stream=stream0)
    # [Provenance debug handles] extern_kernels.mm:2
    extern_kernels.mm(buf1, arg1_1, out=buf2)
    # [Provenance debug handles] triton_poi_fused_mul_silu_1:3
    triton_poi_fused_mul_silu_1.run(buf2, buf3, stream=stream0)
    # [Provenance debug handles] triton_poi_fused_mul_silu_1:4
    triton_poi_fused_mul_silu_1.run(buf3, buf4, stream=stream0)
    return (buf4, )
'''


def test_output_code_kernels():
    kernels = {k.name: k for k in parse_output_code(GPU_CODE)}
    assert list(kernels) == ["triton_red_fused_mean_pow_rsqrt_0", "extern_kernels.mm", "triton_poi_fused_mul_silu_1"]
    red = kernels["triton_red_fused_mean_pow_rsqrt_0"]
    assert (red.kind, red.launches, red.nodes) == ("generated", 1, ["pow_1", "mean", "rsqrt"])
    assert red.ops == ["aten.pow", "aten.mean", "aten.rsqrt"] and red.num_gb == pytest.approx(0.0042)
    assert kernels["extern_kernels.mm"].kind == "extern" and kernels["extern_kernels.mm"].ops == ["aten.mm"]
    silu = kernels["triton_poi_fused_mul_silu_1"]
    assert silu.launches == 2 and silu.ops == ["aten.mul", "aten.silu"]  # from its name: no comment names it
    assert graph_kind(GPU_CODE) == "backward"


def test_launches_take_the_provenance_of_their_handle():
    launches = launches_from_code(GPU_CODE, {"triton_poi_fused_mul_silu_1:3": ["mul", "sigmoid"],
                                             "extern_kernels.mm:2": ["mm"]})
    assert [(l.kernel, l.nodes) for l in launches] == [
        ("triton_red_fused_mean_pow_rsqrt_0", []), ("extern_kernels.mm", ["mm"]),
        ("triton_poi_fused_mul_silu_1", ["mul", "sigmoid"]), ("triton_poi_fused_mul_silu_1", [])]


def test_ops_from_descriptive_names():
    assert ops_from_name("cpp_fused__to_copy_add_native_layer_norm_backward_3") == [
        "aten._to_copy", "aten.add", "aten.native_layer_norm_backward"]
    assert ops_from_name("extern_kernels.mm") == []


def test_refusals_name_the_nodes_on_each_side():
    lines = [
        "  SchedulerNode(name='op1'), Pointwise(['[64, 256]', 'origins=OrderedSet([exp, sub])'])",
        "  SchedulerNode(name='op3'), Pointwise(['[64, 256]', 'origins=OrderedSet([div])'])",
        "  SchedulerNode(name='op2'), Reduction(['[64]', 'origins=OrderedSet([sum_1])'])",
        "cannot fuse op1_op2 with op3: intermediate nodes between node1 & node2",
        "cannot fuse op1_op2 with op3: no shared data",
    ]
    (r,) = refusals_from_log(lines)
    assert r.a == ["exp", "sub", "sum_1"] and r.b == ["div"] and r.reason == "no shared data"


def test_capture_forward_and_backward_on_cpu():
    def f(x, w):
        return torch.nn.functional.silu(x @ w).sum()

    torch._dynamo.reset()
    x, w = torch.randn(16, 32, requires_grad=True), torch.randn(32, 8, requires_grad=True)
    with InductorCapture() as cap:
        torch.compile(f)(x, w).backward()
    torch._dynamo.reset()
    assert [g.kind for g in cap.graphs] == ["forward", "backward"]
    fwd = cap.graphs[0]
    assert any(n.op == "mm" and n.klass == "compute" for n in fwd.nodes)
    mm = [l for l in fwd.launches if l.kernel == "extern_kernels.mm"]
    assert mm and mm[0].nodes == ["mm"]
    generated = [l for l in fwd.launches if l.kernel.startswith("cpp_fused")]
    assert generated and all(l.nodes for l in generated)
    # settings are restored
    from torch._inductor import config
    assert config.post_grad_custom_post_pass is None and config.trace.provenance_tracking_level == 0
