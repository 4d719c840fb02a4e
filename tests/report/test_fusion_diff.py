"""Where two measurements of a cell differ in their fusion facts (report/fusion_diff.py)."""
import json

import pandas as pd

from fusebench.report.fusion_diff import between, diff_facts, has_facts, lines, table

SIN = {"graph": "inference", "kind": "generated", "launches": 1, "ops": ["aten.sin"], "name": "cpp_fused_sin_0"}
FUSED = {"graph": "inference", "kind": "generated", "launches": 1, "ops": ["aten.add", "aten.cos", "aten.sin"],
         "name": "cpp_fused_add_cos_sin_0"}
COS = {"graph": "inference", "kind": "generated", "launches": 1, "ops": ["aten.add", "aten.cos"],
       "name": "cpp_fused_add_cos_1"}


def row(kernels, breaks=0, recompiles=0, **extra):
    gen = sum(k["launches"] for k in kernels if k["kind"] == "generated")
    return {"case_name": "c", "impl": "inductor", "dtype": "fp32", "shape": "64x64", "generated_kernels": gen,
            "extern_kernels": sum(k["launches"] for k in kernels) - gen, "fusion_kernels": json.dumps(kernels),
            "graph_breaks": breaks, "recompiles": recompiles, **extra}


def test_same_facts_under_other_names_do_not_differ():
    assert diff_facts(row([FUSED]), row([dict(FUSED, name="cpp_fused_add_cos_sin_7")])) == []


def test_a_split_fusion_is_more_kernels_other_ops_and_a_graph_break():
    changes = {c.what: c for c in diff_facts(row([FUSED]), row([SIN, COS], breaks=1))}
    assert set(changes) == {"kernels", "ops", "graph_breaks"} and all(c.worse for c in changes.values())
    assert changes["kernels"].text == "kernels per call: 1 generated + 0 extern -> 2 generated + 0 extern"
    ops = changes["ops"].text.splitlines()
    assert "  - inference generated x1: aten.add, aten.cos, aten.sin" in ops
    assert "  + inference generated x1: aten.sin" in ops and "  + inference generated x1: aten.add, aten.cos" in ops
    assert changes["graph_breaks"].text == "graph breaks: 0 -> 1"


def test_better_fusion_differs_but_fewer_kernels_and_breaks_are_not_worse():
    changes = {c.what: c for c in diff_facts(row([SIN, COS], breaks=1), row([FUSED]))}
    assert not changes["kernels"].worse and not changes["graph_breaks"].worse
    assert changes["ops"].worse  # another fusion: the baseline must be updated to accept it


def test_recompiles_gained_and_facts_lost():
    assert [c.text for c in diff_facts(row([FUSED]), row([FUSED], recompiles=2))] == ["recompiles: 0 -> 2"]
    lost = diff_facts(row([FUSED]), {"graph_breaks": 0})
    assert [c.what for c in lost] == ["facts"] and lost[0].worse
    assert not has_facts({"case_name": "c", "fusion_kernels": float("nan"), "generated_kernels": float("nan")})


def test_between_lists_only_cells_of_both_runs_whose_facts_differ():
    a = pd.DataFrame([row([FUSED]), row([FUSED], shape="128x128"), row([FUSED], shape="256x256"),
                      {"case_name": "c", "impl": "eager", "dtype": "fp32", "shape": "64x64"}])
    b = pd.DataFrame([row([SIN, COS], breaks=1), row([dict(FUSED, name="x_3")], shape="128x128"),
                      {"case_name": "c", "impl": "eager", "dtype": "fp32", "shape": "64x64"}])
    diffs = between(a, b)
    assert [d.label for d in diffs] == ["c inductor 64x64 fp32"]
    text = lines(diffs)
    assert text[0] == "c inductor 64x64 fp32" and "  graph breaks: 0 -> 1" in text
    t = table(diffs)
    assert len(t.rows) == 1 and "graph breaks: 0 -> 1" in t.rows[0][4].text
