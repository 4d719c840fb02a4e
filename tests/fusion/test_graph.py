"""Graph summaries, unavoidable bytes and regions, on graphs traced here (no compile)."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from fusebench.fusion.graph import GraphIndex, regions, summarize


def _graph(fn, *args):
    return summarize(make_fx(fn, tracing_mode="fake")(*args).graph)


def norm_mm_act(x, w, m):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    z = y @ m
    return torch.nn.functional.silu(z) * z


def test_nodes_are_classified():
    nodes = _graph(norm_mm_act, torch.randn(32, 128), torch.randn(128), torch.randn(128, 64))
    klass = {n.op: n.klass for n in nodes if n.klass != "input"}
    assert klass["mm"] == "compute"
    assert klass["rsqrt"] == "memory" and klass["mean"] == "memory"
    mm = next(n for n in nodes if n.op == "mm")
    assert mm.flops == 2 * 32 * 128 * 64
    assert mm.nbytes == 32 * 64 * 4 and mm.shape == (32, 64) and mm.dtype == "float32"


def test_regions_lie_between_compute_nodes():
    nodes = _graph(norm_mm_act, torch.randn(32, 128), torch.randn(128), torch.randn(128, 64))
    found = regions(nodes)
    assert len(found) == 2
    norm, act = found
    assert {"pow", "mean", "rsqrt", "mul"} <= set(norm.ops) and "silu" not in norm.ops
    assert "mm" in norm.before and "mm" in act.after
    # The norm reads x (32x128) and w (128) and leaves y (32x128) for the GEMM: nothing in between counts.
    assert norm.read_bytes == (32 * 128 + 128) * 4
    assert norm.write_bytes == 32 * 128 * 4
    # The activation reads z once (used twice) and writes its result.
    assert act.read_bytes == 32 * 64 * 4 and act.write_bytes == 32 * 64 * 4


def test_views_alias_their_input_and_expand_reads_the_small_tensor():
    def f(x, b):
        return (x.view(64, 32) + b.expand(64, 32)).t().contiguous()

    nodes = _graph(f, torch.randn(32, 64), torch.randn(32))
    (r,) = regions(nodes)
    assert r.read_bytes == (32 * 64 + 32) * 4
    assert r.write_bytes == 32 * 64 * 4
    index = GraphIndex(nodes)
    view = next(n.name for n in nodes if n.op == "view")
    assert index.root(view) == next(n.name for n in nodes if n.klass == "input")


def test_fused_kernels_join_one_region():
    def two(a, b, m):
        return (a.sin() @ m), (b.cos() @ m)

    nodes = _graph(two, torch.randn(8, 8), torch.randn(8, 8), torch.randn(8, 8))
    assert len(regions(nodes)) == 2
    sin = next(n.name for n in nodes if n.op == "sin")
    cos = next(n.name for n in nodes if n.op == "cos")
    assert len(regions(nodes, together=[{sin, cos}])) == 1  # one kernel computed both


def test_mutation_counts_as_a_write():
    def f(buf, x):
        buf.copy_(x * 2)
        return x + 1

    nodes = _graph(f, torch.randn(16), torch.randn(16))
    index = GraphIndex(nodes)
    copy = next(n.name for n in nodes if n.op.startswith("copy"))
    mul = next(n.name for n in nodes if n.op == "mul")
    assert index.unavoidable_bytes({copy, mul})[1] >= 16 * 4
