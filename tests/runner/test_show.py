"""`fusebench show`: one cell in depth (fusebench/runner/show.py)."""
from __future__ import annotations

import json

import pytest
import torch

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_show_cell_cpu_inductor():
    from io import StringIO

    from rich.console import Console

    from fusebench.runner.show import print_show, show_cell

    r = show_cell("pointwise_chain", "inductor", "64x64", device="cpu",
                  families=("kernels", "memory", "flops", "roofline"))
    assert r["status"] == "ok", r["reason"]
    assert r["row"]["kernels"] == 1 and r["row"]["time_us"] > 0
    assert r["code"] and "cpp_fused" in r["code"][0]
    buf = StringIO()
    print_show(r, Console(file=buf, width=120), code_lines=10)
    text = buf.getvalue()
    assert "kernels" in text and "Inductor output code" in text and "not available because" in text
    json.dumps({k: v for k, v in r.items() if k != "code"}, default=str)  # plain data


def test_inductor_autotune_choices_from_loaded_modules(monkeypatch):
    import types

    from torch._inductor.codecache import PyCodeCache

    from fusebench.runner.show import _fmt, inductor_autotune_choices

    class Launcher:
        config = "XBLOCK: 1, R0_BLOCK: 2048, num_warps: 16"

    mod = types.ModuleType("fake_output_code")
    mod.triton_red_fused_sum_0 = types.SimpleNamespace(launchers=[Launcher()], configs=None)
    mod.triton_poi_fused_add_1 = types.SimpleNamespace(launchers=[Launcher(), Launcher()], configs=[1, 2])
    mod.other = 3
    monkeypatch.setattr(PyCodeCache, "modules", [mod])
    got = inductor_autotune_choices(["triton_red_fused_sum_0", "triton_poi_fused_add_1", "missing"])
    assert got[0] == {"kernel": "triton_red_fused_sum_0", "config": Launcher.config, "candidates": None}
    assert got[1]["config"].startswith("not reduced to one") and got[1]["candidates"] == 2
    assert len(got) == 2
    assert _fmt(268557312.0) == "268,557,312" and _fmt(0.5) == "0.500"


@gpu
@needs_cuda
def test_gpu_show_inductor():
    from fusebench.runner.show import show_cell

    r = show_cell("pointwise_chain", "inductor", "4096x4096", device="cuda",
                  families=("kernels", "graph", "memory", "flops", "roofline"))
    assert r["status"] == "ok", r["reason"]
    assert len(r["kernels"]) == 1 and r["kernels"][0]["dur_us"] > 0
    assert r["code"] and "triton_poi_fused" in r["code"][0]
    assert [a["kernel"] for a in r["autotune"]] == ["triton_poi_fused_add_cos_maximum_mul_0"]
