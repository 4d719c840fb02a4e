"""Fusion facts of a cell: the kernels of the captured graphs, as columns and as comparable data."""
import json

import pytest

from fusebench.fusion.capture import CompiledGraph
from fusebench.fusion.code import KernelInfo
from fusebench.fusion.facts import (COLUMNS, describe, facts_from_graphs, kernels_of, signature, signatures,
                                    stable_name)
from fusebench.store import CELL_COLUMNS


def graph(kind, *kernels):
    return CompiledGraph(kind, "", [KernelInfo(*k) for k in kernels])


def test_facts_count_generated_and_extern_launches_of_every_graph():
    facts = facts_from_graphs([
        graph("forward", ("cpp_fused_add_mul_0", "generated", 1, ["aten.add", "aten.mul"]),
              ("extern_kernels.mm", "extern", 2, ["aten.mm"])),
        graph("backward", ("cpp_fused_sum_0", "generated", 1, ["aten.sum"]),
              ("aten.cumsum.default", "fallback", 1, ["aten.cumsum"])),
    ])
    assert (facts.generated, facts.extern, facts.graphs) == (2, 3, 2)
    cols = facts.columns()
    assert set(cols) == set(COLUMNS) and set(COLUMNS) <= set(CELL_COLUMNS)
    kernels = json.loads(cols["fusion_kernels"])
    assert kernels[0] == {"graph": "forward", "kind": "generated", "launches": 1, "ops": ["aten.add", "aten.mul"],
                          "name": "cpp_fused_add_mul_0"}
    assert [k["graph"] for k in kernels] == ["forward", "forward", "backward", "backward"]


def test_kernels_compare_by_graph_kind_and_ops_not_by_name():
    a = [{"graph": "inference", "kind": "generated", "launches": 1, "ops": ["aten.sin"], "name": "cpp_fused_sin_0"},
         {"graph": "inference", "kind": "extern", "launches": 1, "ops": ["aten.mm"], "name": "extern_kernels.mm"}]
    renumbered = [dict(a[1]), dict(a[0], name="cpp_fused_sin_3")]  # another index, another order
    assert signatures(a) == signatures(renumbered)
    relaunched = [dict(a[0], launches=2), a[1]]
    assert signatures(a) != signatures(relaunched)
    assert signature(a[0]) == ("inference", "generated", ("aten.sin",))
    assert describe(signature(a[0]), 2) == "inference generated x2: aten.sin"
    assert stable_name("cpp_fused_add_cos_12") == "cpp_fused_add_cos"
    assert stable_name("extern_kernels.mm") == "extern_kernels.mm"


def test_kernels_of_reads_stored_values_and_refuses_others():
    assert kernels_of(None) is None and kernels_of(float("nan")) is None and kernels_of("") is None
    stored = json.dumps([{"kind": "generated", "ops": ["aten.add"]}])
    assert kernels_of(stored) == [{"graph": "graph", "kind": "generated", "launches": 1, "ops": ["aten.add"],
                                   "name": ""}]
    for bad in ('{"kind": "generated"}', "[1, 2]", '[{"ops": []}]'):
        with pytest.raises(ValueError):
            kernels_of(bad)
