"""`fusebench audit` and what results, report, runs and compare do with an audit run.  The measuring
core is replaced by a synthetic result: nothing is compiled here."""
import hashlib
import json
import os
import sqlite3
import textwrap

import pytest
from typer.testing import CliRunner

from audit_fixtures import store_audit, store_cells_run, synthetic_audit
from fusebench.audit import measure
from fusebench.cli import app

runner = CliRunner()

PLUGIN = textwrap.dedent('''
    import torch
    import fusebench

    @fusebench.model(sizes={"batch": 2, "width": 8})
    def tiny(batch, width, *, dtype, device, seed):
        """one linear layer"""
        m = torch.nn.Linear(width, width).to(device=device, dtype=dtype)
        return m, (torch.randn(batch, width, device=device, dtype=dtype),)

    @fusebench.model(sizes={"batch": 2})
    def broken(batch, *, dtype, device, seed):
        raise RuntimeError("this model cannot be built")
''')


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def plugin(tmp_path, user_models):
    path = tmp_path / "my_models.py"
    path.write_text(PLUGIN)
    return str(path)


@pytest.fixture
def fake_measure(monkeypatch):
    """measure_audit replaced: records the requests it got, returns a synthetic audit of them."""
    calls = []

    def fake(request, on_progress=None, **kwargs):
        calls.append(request)
        for backend in request.backends if on_progress else ():
            on_progress(backend)
        result = synthetic_audit(device=request.device, mode=request.mode, backends=tuple(request.backends),
                                 model=request.model)
        result.dtype, result.sizes = request.dtype, dict(request.sizes)
        return result

    monkeypatch.setattr(measure, "measure_audit", fake)
    return calls


def digest(path) -> str | None:
    return hashlib.sha256(open(path, "rb").read()).hexdigest() if os.path.exists(path) else None


def test_audit_stores_a_run_and_prints_it(db, plugin, fake_measure):
    r = invoke("audit", "tiny", "--plugin", plugin, "--db", db, "--mode", "fwd_bwd", "--size", "batch=4",
               "--compile-mode", "default,max-autotune", "--device", "cpu", "--no-compile-time", "--timeout", "60")
    assert r.exit_code == 0, r.output
    (request,) = fake_measure
    assert request.sizes == {"batch": 4, "width": 8} and request.dtype == "fp32"  # the CPU's default
    assert request.backends == ["eager", "inductor", "inductor-max-autotune"]
    assert request.compile_time is False and request.timeout_s == 60.0
    assert "audit of tiny · fwd_bwd · fp32 · batch=4 width=8" in r.output
    assert "opportunities in inductor" in r.output and "stored as run 1" in r.output
    con = sqlite3.connect(db)
    status, req = con.execute("SELECT status, request FROM runs").fetchone()
    assert status == "done" and json.loads(req)["kind"] == "audit"
    assert json.loads(req)["plugins"][0]["path"] == plugin
    assert con.execute("SELECT COUNT(*) FROM audit_regions").fetchone()[0] == 4
    assert con.execute("SELECT COUNT(*) FROM cells").fetchone()[0] == 0


@pytest.mark.parametrize("args,message", [
    (["nosuchmodel"], "unknown model 'nosuchmodel"),
    (["tiny", "--size", "batch"], "malformed size 'batch'"),
    (["tiny", "--size", "batch=two"], "size batch='two' is not an integer"),
    (["tiny", "--size", "depth=3"], "model tiny has no size 'depth'"),
    (["tiny", "--size", "batch=0"], "size batch of model tiny must be a positive integer"),
    (["tiny", "--size", "batch=2", "--sizes", "width=4"], "with --size or with --sizes, not both"),
    (["tiny", "--mode", "bwd"], "unknown mode 'bwd'"),
    (["tiny", "--dtype", "fp8"], "unknown dtype 'fp8'"),
    (["tiny", "--compile-mode", "fastest"], "unknown compile mode 'fastest'"),
    (["tiny", "--baseline", "inductor-max-autotune"], "--baseline 'inductor-max-autotune' is not one"),
    (["tiny", "--device", "tpu"], "unknown device 'tpu'"),
    (["tiny", "--ncu"], "No such option: --ncu"),
    (["broken"], "model broken failed to build: RuntimeError: this model cannot be built"),
    (["tiny", "--top", "0"], "--top must be at least 1"),
    (["tiny", "--timeout", "0"], "--timeout 0.0: must be a positive number of seconds"),
    ([], "give the model to audit"),
])
def test_bad_input_is_one_line_exit_2_and_the_store_unchanged(db, plugin, fake_measure, args, message):
    store_audit(db, synthetic_audit())
    before = digest(db)
    extra = ["--device", "cpu"] if "--device" not in args else []
    r = invoke("audit", *args, "--plugin", plugin, "--db", db, *extra)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("fusebench: error: ") and message in lines[0], r.output
    assert digest(db) == before and not fake_measure


def test_a_plugin_that_fails_to_import_or_is_missing(db, tmp_path, fake_measure, user_models):
    bad = tmp_path / "bad.py"
    bad.write_text("import no_such_module_here\n")
    for path, message in ((bad, "failed to import (line 1)"), (tmp_path / "none.py", "plugin file not found")):
        r = invoke("audit", "tiny", "--plugin", path, "--db", db, "--device", "cpu")
        assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not os.path.exists(db) and not fake_measure


@pytest.mark.parametrize("kind", ["foreign", "missing_dir"])
def test_a_store_that_cannot_take_the_run_is_refused_before_measuring(tmp_path, plugin, fake_measure, kind):
    if kind == "foreign":
        path = tmp_path / "other.db"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE t (x)")
        con.commit()
        con.close()
        message = "an SQLite database of something else"
    else:
        path = tmp_path / "no" / "such" / "fb.db"
        message = "does not exist"
    before = digest(path)
    r = invoke("audit", "tiny", "--plugin", plugin, "--db", path, "--device", "cpu")
    assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert digest(path) == before and not fake_measure


def test_ctrl_c_while_measuring_leaves_the_run_interrupted_and_the_store_usable(db, plugin, monkeypatch):
    def interrupted(request, on_progress=None, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(measure, "measure_audit", interrupted)
    r = invoke("audit", "tiny", "--plugin", plugin, "--db", db, "--device", "cpu")
    assert r.exit_code == 130 and "run 1 is stored as interrupted" in r.output, r.output
    assert sqlite3.connect(db).execute("SELECT status FROM runs WHERE id=1").fetchone()[0] == "interrupted"
    r = invoke("runs", "--db", db)
    assert r.exit_code == 0 and "interrupted" in r.output, r.output
    r = invoke("results", "--run", "1", "--db", db)
    assert r.exit_code == 2 and "stored no results (its status: interrupted)" in r.output, r.output
    rid = store_audit(db, synthetic_audit())  # the store takes the next run
    assert invoke("results", "--run", rid, "--db", db).exit_code == 0


def test_an_error_of_the_measurement_leaves_the_run_failed(db, plugin, monkeypatch):
    def broken(request, on_progress=None, **kwargs):
        raise RuntimeError("profiler crashed")

    monkeypatch.setattr(measure, "measure_audit", broken)
    r = invoke("audit", "tiny", "--plugin", plugin, "--db", db, "--device", "cpu")
    assert r.exit_code != 0 and isinstance(r.exception, RuntimeError)
    assert sqlite3.connect(db).execute("SELECT status FROM runs WHERE id=1").fetchone()[0] == "failed"


def test_list_shows_the_models_with_their_sizes(plugin):
    r = invoke("audit", "--list", "--plugin", plugin)
    assert r.exit_code == 0, r.output
    assert "tiny" in r.output and "batch=2 width=8" in r.output and "one linear layer" in r.output


def test_results_prints_and_exports_an_audit(db, tmp_path):
    result = synthetic_audit()
    rid = store_audit(db, result)
    r = invoke("results", "--db", db)  # the latest run
    assert r.exit_code == 0 and "audit of tiny-llama" in r.output and "opportunities in inductor" in r.output
    r = invoke("results", "--run", rid, "--db", db, "--format", "json")
    assert r.exit_code == 0, r.output
    exported = json.loads(r.output)
    assert exported.pop("run_id") == rid and exported == json.loads(json.dumps(result.as_dict()))
    out = tmp_path / "a.json"
    assert invoke("results", "--db", db, "--format", "json", "-o", out).exit_code == 0
    assert json.loads(out.read_text())["model"] == "tiny-llama"
    r = invoke("results", "--db", db, "--format", "csv")
    assert r.exit_code == 2 and "is an audit: --format table or json" in r.output


def test_report_of_an_audit_and_of_runs_mixing_one(db, tmp_path):
    cells = store_cells_run(db)
    rid = store_audit(db, synthetic_audit())
    out = tmp_path / "a.html"
    r = invoke("report", "--run", rid, "--db", db, "-o", out)
    assert r.exit_code == 0 and "wrote" in r.output, r.output
    assert "Opportunities in inductor" in out.read_text(encoding="utf-8")
    r = invoke("report", "--run", f"{cells},{rid}", "--db", db, "-o", tmp_path / "b.html")
    assert r.exit_code == 2 and f"run {rid} is an audit: report it alone" in r.output
    r = invoke("report", "--run", rid, "--db", db, "--pair", "triton/inductor", "-o", tmp_path / "b.html")
    assert r.exit_code == 2 and "--pair applies to runs of cells" in r.output
    assert not (tmp_path / "b.html").exists()


def test_compare_two_audits_and_refuse_an_audit_against_cells(db, tmp_path):
    a = store_audit(db, synthetic_audit())
    b = store_audit(db, synthetic_audit(scale=0.8))
    cells = store_cells_run(db)
    out = tmp_path / "c.html"
    r = invoke("compare", a, b, "--db", db, "-o", out)
    assert r.exit_code == 0, r.output
    assert "steps, A vs B" in r.output and "regions of inductor" in r.output and "wrote" in r.output
    assert "Regions of inductor" in out.read_text(encoding="utf-8")
    for x, y in ((a, cells), (cells, a)):
        r = invoke("compare", x, y, "--db", db, "-o", tmp_path / "d.html")
        assert r.exit_code == 2 and f"run {a} is an audit and run {cells} a run of cells" in r.output, r.output
    fwd = store_audit(db, synthetic_audit(mode="fwd"))
    r = invoke("compare", a, fwd, "--db", db, "-o", tmp_path / "d.html")
    assert r.exit_code == 2 and "only audits of one mode compare" in r.output
    r = invoke("compare", a, b, "--db", db, "-o", tmp_path / "d.html", "--fail-above", "5")
    assert r.exit_code == 2 and "--fail-above" in r.output
    assert not (tmp_path / "d.html").exists()


def test_the_python_api_stores_and_returns_the_audit(db, plugin, fake_measure):
    import fusebench

    result = fusebench.audit_model("tiny", plugins=plugin, db=db, device="cpu", sizes="width=16")
    assert result.model == "tiny" and result.sizes == {"batch": 2, "width": 16}
    assert fusebench.audit.__name__ == "fusebench.audit"  # the subpackage stays reachable
    with pytest.raises(ValueError, match="unknown model"):
        fusebench.audit_model("nosuch", db=str(db) + ".2", device="cpu")
    assert not os.path.exists(str(db) + ".2")


def test_runs_lists_an_audit_by_what_it_measured(db, monkeypatch):
    from fusebench.commands import common

    monkeypatch.setattr(common.out, "width", 400)  # the request on one line
    store_cells_run(db)
    store_audit(db, synthetic_audit())
    r = invoke("runs", "--db", db)
    assert r.exit_code == 0, r.output
    assert "audit tiny-llama fwd_bwd bf16 batch=1 tokens=128: eager, inductor" in r.output


def test_merge_carries_an_audit_with_its_rows(db, tmp_path):
    result = synthetic_audit()
    store_audit(db, result)
    target = str(tmp_path / "all.db")
    store_cells_run(target)
    r = invoke("merge", db, "--db", target)
    assert r.exit_code == 0, r.output
    r = invoke("results", "--run", 2, "--db", target, "--format", "json")
    assert r.exit_code == 0, r.output
    exported = json.loads(r.output)
    assert exported.pop("run_id") == 2 and exported == json.loads(json.dumps(result.as_dict()))
