"""Inductor cells record their fusion facts from the output code of their own compile."""
import json

import pytest

from fusebench.impls.inductor import CodeWatch
from fusebench.measure.timing import TimingSettings
from fusebench.runner.cell import measure_cell
from fusebench.runner.plan import Cell

BRIEF = TimingSettings(warmup_ms=1, rep_ms=5, min_reps=3, host_max_ms=10)


def test_code_watch_collects_from_its_first_entry_only_and_restores_inductor():
    from torch._inductor.graph import GraphLowering

    before = GraphLowering.__dict__["save_output_code"]
    watch = CodeWatch()
    with watch.watching():
        assert GraphLowering.__dict__["save_output_code"] is not before
        GraphLowering.save_output_code("# AOT ID: ['0_inference']\ncpp_fused_sin_0 = async_compile.cpp_pybinding("
                                       "['float*'], '''code''')\ndef call(args):\n    cpp_fused_sin_0(a, b)\n")
    assert GraphLowering.__dict__["save_output_code"] is before
    with watch.watching():  # a later entry collects nothing
        assert GraphLowering.__dict__["save_output_code"] is before
    facts = watch.facts(1)
    assert (facts["generated_kernels"], facts["extern_kernels"]) == (1, 0)
    assert json.loads(facts["fusion_kernels"]) == [{"graph": "inference", "kind": "generated", "launches": 1,
                                                    "ops": ["aten.sin"], "name": "cpp_fused_sin_0"}]


def test_no_code_is_not_available_with_the_reason():
    watch = CodeWatch()
    with watch.watching():
        pass
    assert watch.facts(2) == {"na": {c: "Inductor handed over no output code for the 2 graph(s) Dynamo compiled"
                                     for c in ("generated_kernels", "extern_kernels", "fusion_kernels")}}


@pytest.mark.slow
@pytest.mark.parametrize("case,shape,mode,graphs", [
    ("softmax", (64, 64), "fwd", ["inference"]),
    ("rmsnorm", (64, 128), "fwd_bwd", ["forward", "backward"]),
])
def test_a_cell_records_the_kernels_of_its_compile(case, shape, mode, graphs):
    row = measure_cell(Cell(case, "inductor", shape, "fp32", "cpu", mode), BRIEF)
    assert row["status"] == "ok", row.get("reason")
    kernels = json.loads(row["fusion_kernels"])
    assert [k["graph"] for k in kernels] == graphs
    assert all(k["kind"] == "generated" and k["launches"] == 1 and k["ops"] for k in kernels)
    assert (row["generated_kernels"], row["extern_kernels"], row["graph_breaks"]) == (len(graphs), 0, 0)
