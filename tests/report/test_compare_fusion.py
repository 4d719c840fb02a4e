"""`fusebench compare` lists the cells whose fusion facts differ between two runs."""
import json

FUSED = {"graph": "inference", "kind": "generated", "launches": 1, "ops": ["aten.add", "aten.cos", "aten.sin"],
         "name": "cpp_fused_add_cos_sin_0"}
SPLIT = [{"graph": "inference", "kind": "generated", "launches": 1, "ops": ["aten.sin"], "name": "cpp_fused_sin_0"},
         {"graph": "inference", "kind": "generated", "launches": 1, "ops": ["aten.add", "aten.cos"],
          "name": "cpp_fused_add_cos_1"}]


def test_compare_reports_the_fusion_facts_of_two_runs(db, tmp_path):
    from typer.testing import CliRunner

    from fusebench.cli import app
    from fusebench.report.compare import render_compare
    from fusebench.store import Store

    with Store.open(db) as store:
        for kernels, breaks in (([FUSED], 0), (SPLIT, 1)):
            rid = store.start_run({"device": "cpu", "device_name": "x86_64", "torch": "2.13.0"}, {"mode": "fwd"}, {})
            store.add_cell(rid, {"case_name": "softmax", "impl": "inductor", "shape": "64x64", "dtype": "fp32",
                                 "requested_dtype": "fp32", "device": "cpu", "status": "ok", "time_us": 10.0,
                                 "generated_kernels": len(kernels), "extern_kernels": 0,
                                 "fusion_kernels": json.dumps(kernels), "graph_breaks": breaks, "recompiles": 0})
            store.finish_run(rid)
        out = str(tmp_path / "cmp.html")
        result = render_compare(store, 1, store, 2, out)
    assert [d.label for d in result.fusion_changes] == ["softmax inductor 64x64 fp32"]
    html = open(out, encoding="utf-8").read()
    assert "Fusion facts that differ" in html and "graph breaks: 0 -&gt; 1" in html
    r = CliRunner().invoke(app, ["compare", "1", "2", "--db", db, "-o", out], terminal_width=200)
    assert r.exit_code == 0, r.output
    text = r.output.splitlines()
    at = text.index("fusion facts differ at 1 cell(s) (A -> B):")
    assert text[at + 1:at + 3] == ["  softmax inductor 64x64 fp32",
                                   "    kernels per call: 1 generated + 0 extern -> 2 generated + 0 extern"]
