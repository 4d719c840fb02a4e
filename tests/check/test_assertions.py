"""assert_fused: Inductor's kernels per call of a function, and on failure what it generated and why."""
import sys

import pytest
import torch

from fusebench import assert_fused
from fusebench.check.assertions import CeilingNotMeasured, FusionReport, inspect
from fusebench.fusion.capture import CompiledGraph, Refusal
from fusebench.fusion.code import KernelInfo


def split(x):
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos() + 1


@pytest.mark.parametrize("kwargs,message", [
    ({"max_kernels": -1}, "max_kernels=-1"), ({"max_kernels": 1.5}, "max_kernels=1.5"),
    ({"min_ceiling": 80}, "min_ceiling=80: a fraction"), ({"mode": "train"}, "unknown mode 'train'"),
])
def test_bad_arguments_are_refused_before_compiling(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        assert_fused(torch.sin, torch.randn(4), **kwargs)


def test_the_report_lists_kernels_breaks_and_refusals():
    g = CompiledGraph("inference", "", [KernelInfo("cpp_fused_sub_sum_0", "generated", 1, ["aten.sub", "aten.sum"]),
                                        KernelInfo("extern_kernels.mm", "extern", 1, ["aten.mm"])],
                      refusals=[Refusal(["sum_1"], ["sub"], "no shared data")])
    report = FusionReport("fwd", [g], ["Call to `torch._dynamo.graph_break()`\n  Explanation: ..."], 2, detail=True)
    assert (report.generated, report.extern, report.kernels) == (1, 1, 2)
    assert report.text().splitlines() == [
        "Inductor's kernels (fwd; 1 graph(s), 1 graph break(s)):",
        "  graph 1 (inference):",
        "    cpp_fused_sub_sum_0  generated  x1  aten.sub, aten.sum",
        "    extern_kernels.mm    extern     x1  aten.mm",
        "Dynamo's graph breaks (kernels of different graphs are never fused):",
        "  - Call to `torch._dynamo.graph_break()`",
        "Inductor's reasons not to fuse (its fusion log):",
        "  [sum_1] with [sub]: no shared data",
    ]


@pytest.mark.slow
def test_a_fused_function_passes_and_a_split_one_fails_with_its_kernels():
    report = assert_fused(lambda x: (x.sin() + 1).cos(), torch.randn(16, 16), max_kernels=1)
    assert report.kernels == 1 and report.graphs[0].kernels[0].ops == ["aten.add", "aten.cos", "aten.sin"]
    with pytest.raises(AssertionError) as exc:
        assert_fused(split, torch.randn(16, 16), max_kernels=1)
    text = str(exc.value)
    assert text.startswith("assert_fused(split): 2 kernels per call (2 generated + 0 extern), expected at most 1")
    assert "    cpp_fused_sin_0  generated  x1  aten.sin" in text
    assert "aten.add, aten.cos" in text and "Dynamo's graph breaks" in text
    assert assert_fused(split, torch.randn(16, 16), max_kernels=2).kernels == 2


@pytest.mark.slow
def test_training_modes_count_forward_and_backward_and_extern_kernels():
    def step(x, w):
        return torch.mm(x, w).relu()

    x, w = torch.randn(8, 16), torch.randn(16, 4)
    both = inspect(step, x, w, mode="fwd_bwd")
    assert [g.kind for g in both.graphs] == ["forward", "backward"] and both.extern >= 3  # mm, and two for grads
    backward = inspect(step, x, w, mode="bwd")
    assert [g.kind for g in backward.graphs] == ["backward"] and backward.kernels < both.kernels
    with pytest.raises(AssertionError, match="extern"):
        assert_fused(step, x, w, mode="fwd_bwd", max_kernels=1)


@pytest.mark.slow
def test_min_ceiling_on_a_cpu_is_not_checked_and_says_so(monkeypatch):
    with pytest.raises(pytest.skip.Exception, match="min_ceiling=0.8 not checked: the copy ceiling is measured on "
                                                    "a CUDA GPU"):
        assert_fused(torch.sin, torch.randn(8), min_ceiling=0.8)
    monkeypatch.setitem(sys.modules, "pytest", None)  # outside pytest
    with pytest.raises(CeilingNotMeasured):
        assert_fused(torch.sin, torch.randn(8), min_ceiling=0.8)


@pytest.mark.gpu
def test_min_ceiling_on_a_gpu():
    x = torch.randn(4096, 4096, device="cuda")
    assert assert_fused(lambda x: x * 2, x, min_ceiling=0.5).kernels == 1
    with pytest.raises(AssertionError, match="of the copy ceiling, expected at least"):
        assert_fused(lambda x: (x * 2).sum(0) + x.sum(1), x, max_kernels=4, min_ceiling=1.4)
