"""Holding a measured cell to its baseline entry, and planning the runs a baseline needs."""
import json

import pytest

from fusebench.check.baseline import Baseline, BaselineError, Entry, Section
from fusebench.check.verify import CheckResult, Measured, Rules, groups, judge, plan, section_for

FUSED = [{"graph": "inference", "kind": "generated", "launches": 1, "ops": ["aten.add", "aten.sin"], "name": "k_0"}]
SPLIT = [{"graph": "inference", "kind": "generated", "launches": 1, "ops": ["aten.sin"], "name": "k_0"},
         {"graph": "inference", "kind": "generated", "launches": 1, "ops": ["aten.add"], "name": "k_1"}]


def entry(**kw):
    base = dict(case="c", impl="inductor", shape="64x64", dtype="fp32", status="ok", tol_ratio=0.01,
                generated_kernels=1, extern_kernels=0, graph_breaks=0, recompiles=0, time_us=100.0,
                time_q20_us=98.0, time_q80_us=102.0, time_spread=0.04, time_reps=100, kernels=FUSED)
    base.update(kw)
    return Entry(**base)


def measured(**kw):
    row = {"case_name": "c", "impl": "inductor", "shape": "64x64", "dtype": "fp32", "requested_dtype": "fp32",
           "mode": "fwd", "status": "ok", "reason": None, "generated_kernels": 1, "extern_kernels": 0,
           "fusion_kernels": json.dumps(FUSED), "graph_breaks": 0, "recompiles": 0, "time_us": 101.0,
           "time_q20_us": 99.0, "time_q80_us": 103.0, "time_spread": 0.04, "kernels": None}
    row.update(kw)
    return row


def test_the_same_cell_holds():
    v = judge(entry(), measured())
    assert v.problems == [] and v.notes == []


def test_a_split_fusion_fails_with_every_fact_that_changed():
    v = judge(entry(), measured(generated_kernels=2, fusion_kernels=json.dumps(SPLIT), graph_breaks=1))
    assert v.kinds == {"kernels", "ops", "graph_breaks"}
    assert v.problems[0] == "kernels per call: 1 generated + 0 extern -> 2 generated + 0 extern"
    assert "graph breaks: 0 -> 1" in v.problems


@pytest.mark.parametrize("change,kind", [
    ({"recompiles": 1}, "recompiles"),
    ({"status": "mismatch", "reason": "error 2x the tolerance"}, "status"),
    ({"status": "crashed", "reason": "worker process died"}, "status"),
    ({"fusion_kernels": None, "generated_kernels": None, "extern_kernels": None}, "facts"),
])
def test_each_kind_of_regression_fails(change, kind):
    v = judge(entry(), measured(**change))
    assert kind in v.kinds, v


def test_a_missing_row_fails():
    assert judge(entry(), None).kinds == {"missing"}


def test_changes_for_the_better_are_notes():
    v = judge(entry(status="mismatch", graph_breaks=1), measured(graph_breaks=0))
    assert v.problems == [] and "status: mismatch -> ok" in v.notes and "graph breaks: 1 -> 0" in v.notes


def test_an_unchanged_failure_holds():
    v = judge(entry(status="unsupported", kernels=None, generated_kernels=None, extern_kernels=None),
              measured(status="unsupported", reason="needs a GPU", fusion_kernels=None, generated_kernels=None,
                       extern_kernels=None))
    assert v.problems == []


def test_profiled_kernels_count_on_a_gpu():
    v = judge(entry(impl="triton", kernels=None, generated_kernels=None, extern_kernels=None, profiled_kernels=1),
              measured(impl="triton", fusion_kernels=None, generated_kernels=None, extern_kernels=None, kernels=2))
    assert v.kinds == {"kernels"} and v.problems == ["kernels launched (profiler): 1 -> 2"]


def test_time_fails_beyond_the_noise_and_the_threshold_only():
    slower = measured(time_us=130.0, time_q20_us=128.0, time_q80_us=133.0)
    v = judge(entry(), slower, Rules(max_slowdown_pct=10))
    assert v.kinds == {"time"} and "(+30.0%, outside the noise" in v.problems[0]
    assert judge(entry(), slower, Rules(max_slowdown_pct=50)).problems == []  # real, under the threshold: a note
    assert judge(entry(), slower, Rules(check_time=False)).problems == []
    overlapping = measured(time_us=130.0, time_q20_us=100.0, time_q80_us=140.0)  # within the noise
    assert judge(entry(), overlapping, Rules(max_slowdown_pct=0)).problems == []


def test_groups_name_exactly_the_baseline_cells():
    keys = [("softmax", "eager", "64x64", "fp32", "fwd"), ("softmax", "inductor", "64x64", "fp32", "fwd"),
            ("layernorm", "eager", "64x64", "fp32", "fwd"), ("layernorm", "inductor", "64x64", "fp32", "fwd"),
            ("softmax", "inductor", "128x128", "fp32", "fwd"), ("rmsnorm", "inductor", "64x64", "fp32", "fwd_bwd")]
    gs = groups(keys)
    assert sorted(k for g in gs for k in g.keys()) == sorted(keys)
    assert sum(len(g.keys()) for g in gs) == len(keys)  # no cell twice, none extra
    both = next(g for g in gs if g.cases == ("softmax", "layernorm") or g.cases == ("layernorm", "softmax"))
    assert both.impls == ("eager", "inductor") and both.shapes == ("64x64",)


def test_plan_refuses_cells_the_runner_would_not_run_as_written():
    assert len(plan([("softmax", "inductor", "64x64", "fp32", "fwd")], "cpu")) == 1
    with pytest.raises(ValueError, match="does not apply"):
        plan([("softmax", "torch-mm", "64x64", "fp32", "fwd")], "cpu")
    with pytest.raises(ValueError):
        plan([("nocase", "inductor", "64x64", "fp32", "fwd")], "cpu")


def test_section_for_this_device_class_or_the_one_named():
    b = Baseline({"h100": Section("h100", {}, [entry()])})
    with pytest.raises(BaselineError, match="holds baselines for h100, not for this machine's device class 'cpu'"):
        section_for(b, "b.toml", "cpu", None)
    assert section_for(b, "b.toml", "cpu", "h100").device_class == "h100"
    with pytest.raises(BaselineError, match="no entries for device class 'a100'"):
        section_for(b, "b.toml", "cpu", "a100")


def test_the_report_and_summary():
    verdicts = [judge(entry(), measured(graph_breaks=1)), judge(entry(shape="128x128"), measured(shape="128x128"))]
    result = CheckResult("b.toml", "cpu", verdicts, Rules(check_time=False), Measured({}, {}, [], None))
    assert result.report() == ["FAIL c inductor 64x64 fp32 fwd", "  graph breaks: 0 -> 1"]
    assert result.summary() == ("fusebench check: 1 of 2 cell(s) differ from b.toml (cpu; timing not checked): "
                                "graph break gained: 1")
    ok = CheckResult("b.toml", "cpu", verdicts[1:], Rules(), Measured({}, {}, [], None))
    assert ok.summary() == ("fusebench check: 1 cell(s) hold against b.toml (cpu; slower than 10% beyond the "
                            "noise fails)")
