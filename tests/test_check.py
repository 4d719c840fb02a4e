"""`fusebench check`: this repository's own CPU baseline holds; a case changed so that Inductor
can no longer fuse it fails with the diff; bad input is one line and exit status 2."""
import os
import shutil

import pytest
from typer.testing import CliRunner

from fusebench.check.baseline import read
from fusebench.cli import app

TESTS = os.path.dirname(os.path.abspath(__file__))
BASELINE = os.path.join(TESTS, "data", "fusion-baseline-cpu.toml")
BREAKABLE = os.path.join(TESTS, "fusion", "breakable_case.py")


def invoke(*args):
    return CliRunner().invoke(app, ["check", *args], terminal_width=200)


def test_the_committed_baseline_is_read_and_names_cpu_cells():
    section = read(BASELINE).sections["cpu"]
    inductor = [e for e in section.entries if e.impl == "inductor"]
    assert inductor and all(e.kernels and e.status == "ok" for e in inductor)
    assert {e.impl for e in section.entries} == {"eager", "inductor"}


@pytest.mark.slow
def test_this_repository_holds_its_cpu_baseline(tmp_path):
    # Timing is not checked: on a shared CPU the time of a cell moves with its neighbours' load.
    db = str(tmp_path / "check.db")
    r = invoke("--baseline", BASELINE, "--no-time", "--device", "cpu", "--db", db)
    assert r.exit_code == 0, r.output
    cells = len(read(BASELINE).sections["cpu"].entries)
    assert r.output.strip().splitlines()[-1] == (f"fusebench check: {cells} cell(s) hold against {BASELINE} "
                                                 f"(cpu; timing not checked)")


@pytest.mark.slow
def test_a_case_inductor_can_no_longer_fuse_fails_with_the_diff(tmp_path, monkeypatch):
    baseline = str(tmp_path / "fusebench-baseline.toml")
    r = invoke("--update", "breakable", "--impl", "inductor", "--shapes", "64x64", "--plugin", BREAKABLE,
               "--baseline", baseline)
    assert r.exit_code == 0, r.output
    assert read(baseline).sections["cpu"].entries[0].generated_kernels == 1
    monkeypatch.setenv("FUSEBENCH_TEST_BREAK", "1")  # the workers import the plugin with a graph break
    r = invoke("--baseline", baseline, "--plugin", BREAKABLE, "--no-time")
    assert r.exit_code == 1, r.output
    out = r.output.splitlines()
    assert "FAIL breakable inductor 64x64 fp32 fwd" in out
    assert "  kernels per call: 1 generated + 0 extern -> 2 generated + 0 extern" in out
    assert "    - inference generated x1: aten.add, aten.cos, aten.sin" in out
    assert "    + inference generated x1: aten.sin" in out
    assert "  graph breaks: 0 -> 1" in out
    assert out[-1].startswith("fusebench check: 1 of 1 cell(s) differ from")


@pytest.mark.parametrize("args,message", [
    (["--baseline", "/nonexistent/b.toml"], "no baseline file /nonexistent/b.toml"),
    (["--no-time", "--max-slowdown", "5"], "--max-slowdown applies to the time check"),
    (["--max-slowdown", "-1"], "must be a percentage of at least 0"),
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--mode", "train"], "unknown mode 'train'"),
    (["--device-class", "a100"], "has no entries for device class 'a100' (it holds: h100)"),
    ([], "holds baselines for h100, not for this machine's device class 'cpu'"),
    (["--update", "--no-time"], "--update records the cells"),
    (["--update", "nocase"], "unknown case 'nocase'"),
])
def test_bad_input_is_one_line_and_exit_2_and_touches_no_store(tmp_path, args, message):
    baseline = tmp_path / "b.toml"
    shutil.copy(BASELINE, baseline)
    baseline.write_text(baseline.read_text().replace("[cpu]", "[h100]").replace("[[cpu.cells]]", "[[h100.cells]]"))
    before = baseline.read_text()
    db = tmp_path / "runs.db"
    extra = [] if "--baseline" in args else ["--baseline", str(baseline)]
    r = invoke(*args, *extra, "--device", "cpu", "--db", str(db)) if "--device" not in args else \
        invoke(*args, *extra, "--db", str(db))
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("fusebench: error: ") and message in lines[0], r.output
    assert not db.exists() and baseline.read_text() == before
