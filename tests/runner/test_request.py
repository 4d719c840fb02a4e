"""RunRequest: the CLI and the Python API build the same request, and a checked request holds every
option in its resolved form."""
import os

import pytest
from typer.testing import CliRunner

import fusebench
from fusebench import api
from fusebench.cli import app
from fusebench.measure.load import default_threads
from fusebench.measure.timing import TimingSettings
from fusebench.runner.request import RunRequest, mode_of_run, names, run_mode


def test_the_cli_and_the_python_api_build_the_same_request(monkeypatch, db):
    built = []

    def record(request, on_cell=None, on_plan=None):
        built.append(request)
        raise KeyboardInterrupt  # stop before anything is measured

    monkeypatch.setattr(api, "run_request", record)
    r = CliRunner().invoke(app, ["run", "softmax", "--impl", "eager,inductor", "--shapes", "16x32", "--db", db,
                                 "--no-isolate", "--metrics", "none", "--cell-timeout", "60"])
    assert r.exit_code == 130 and "no run was stored" in r.output, r.output
    with pytest.raises(KeyboardInterrupt):
        fusebench.run(["softmax"], impls=["eager", "inductor"], shapes="16x32", db=db, isolate=False, metrics=(),
                      cell_timeout=60, timing=TimingSettings())
    cli, python = built
    assert cli == python and cli.impls == ["eager", "inductor"] and cli.metrics == ()
    assert not os.path.exists(db)


def test_a_checked_request_holds_each_option_resolved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    checked = api._check(RunRequest(cases="softmax", impls="eager", shapes=[(16, 32)], device="cpu", db="rel.db",
                                    metrics="none", isolate=False))
    try:
        req = checked.request
        assert (req.cases, req.impls, req.shapes, req.metrics) == (["softmax"], ["eager"], "16x32", ())
        assert req.db == str(tmp_path / "rel.db") and req.plugins == () and req.gpus is None
        assert req.timing.threads == default_threads("cpu") and req.isolate is False and req.mode == "fwd"
        assert checked.stored == dict(cases=["softmax"], impls=["eager"], shapes="16x32", dtype=None, device="cpu",
                                      plugins=[], metrics=[], mode="fwd")
        assert [c.impl for c in checked.todo] == ["eager"]
    finally:
        checked.store.close()


@pytest.mark.parametrize("bad, message", [
    (dict(cell_timeout=0), "--cell-timeout"),
    (dict(retry_failed=True), "--retry-failed applies to --resume"),
    (dict(mode="backward"), "unknown mode"),
    (dict(shapes=" , "), "names no shape"),
])
def test_a_refused_request_stores_nothing(db, bad, message):
    with pytest.raises(ValueError, match=message):
        api._check(RunRequest(cases="softmax", impls="eager", device="cpu", db=db, **bad))
    assert not os.path.exists(db)


def test_names_and_stored_modes():
    assert names("a, b,,") == ["a", "b"] and names(["a", " "]) == ["a"] and names("") is None and names(None) is None
    assert run_mode({"mode": "bwd"}) == "bwd" and run_mode({}) == "fwd" and run_mode({"mode": "sideways"}) == "fwd"
    assert mode_of_run({"request": '{"mode": "fwd_bwd"}'}) == "fwd_bwd" and mode_of_run({"request": "{"}) == "fwd"
