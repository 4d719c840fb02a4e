"""The command line: bad input gives one line and exit status 2, and changes nothing stored."""
import json
import os
import sqlite3
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from fusebench.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args))


@pytest.fixture
def stored_run(db):
    r = invoke("run", "softmax", "--shapes", "16x32", "--impl", "eager", "--db", db, "--no-isolate",
               "--metrics", "none")
    assert r.exit_code == 0, r.output
    return db


@pytest.mark.parametrize("args,message", [
    (["run", "sofmax"], "unknown case 'sofmax' (did you mean softmax"),
    (["run", "softmax", "--impl", "inductr"], "unknown implementation 'inductr' (did you mean inductor"),
    (["run", "softmax", "--shapes", "12xab"], "malformed shape '12xab'"),
    (["run", "softmax", "--shapes", "12x0"], "dim1 must be positive"),
    (["run", "softmax", "--shapes", "4x4x4"], "expected 2 dimensions"),
    (["run", "attention", "--shapes", "1x2x64x16x3"], "causal must be 0 or 1"),
    (["run", "softmax", "--dtype", "fp8"], "unknown dtype 'fp8'"),
    (["run", "softmax", "--metrics", "kernls"], "unknown metric 'kernls'"),
    (["run", "softmax", "--plugin", "/nonexistent/cases.py"], "plugin file not found"),
    (["run", "softmax", "--gpus", "x,y"], "malformed --gpus"),
    (["run", "softmax", "--flush", "wipe"], "unknown --flush 'wipe'"),
    (["run", "--resume", "1", "--flush", "zero"], "--resume takes the selection"),
    (["run", "--resume", "1", "--no-warm-call"], "--resume takes the selection"),
    (["results", "--run", "99"], "no run 99"),
    (["results", "--format", "xml"], "unknown format"),
])
def test_bad_input_exits_2_with_one_line(stored_run, args, message):
    before = sqlite3.connect(stored_run).execute("SELECT COUNT(*) FROM cells").fetchone()[0]
    r = invoke(*args, "--db", stored_run) if args[0] in ("run", "results") else invoke(*args)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines[-1].startswith("fusebench: error: ") and message in lines[-1], r.output
    assert sqlite3.connect(stored_run).execute("SELECT COUNT(*) FROM cells").fetchone()[0] == before


def test_run_records_the_flush_it_was_asked_for(stored_run):
    r = invoke("run", "softmax", "--shapes", "16x32", "--impl", "eager", "--db", stored_run, "--no-isolate",
               "--metrics", "none", "--flush", "evict_last")
    assert r.exit_code == 0, r.output
    timings = [json.loads(t)["flush_mode"] for (t,) in sqlite3.connect(stored_run).execute(
        "SELECT timing FROM runs ORDER BY id")]
    assert timings == ["clean", "evict_last"]


def test_run_records_no_warm_call_when_asked(stored_run):
    r = invoke("run", "softmax", "--shapes", "16x32", "--impl", "eager", "--db", stored_run, "--no-isolate",
               "--metrics", "none", "--no-warm-call")
    assert r.exit_code == 0, r.output
    (timing,) = sqlite3.connect(stored_run).execute("SELECT timing FROM runs ORDER BY id DESC").fetchone()
    assert json.loads(timing)["warm_call_max_bytes"] == 0


def test_gpus_beyond_the_visible_ones_exit_2(stored_run, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # one GPU visible: --gpus 1 does not exist
    r = invoke("run", "softmax", "--gpus", "1", "--db", stored_run)
    assert r.exit_code == 2 and "only 1 GPU(s) visible" in r.output.splitlines()[-1], r.output


def test_unreadable_and_foreign_databases_exit_2_untouched(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_text("hello")
    r = invoke("run", "softmax", "--shapes", "8x8", "--db", str(bad))
    assert r.exit_code == 2 and "not an SQLite database" in r.output
    assert bad.read_text() == "hello"
    r = invoke("results", "--db", str(bad))
    assert r.exit_code == 2


def test_list_shows_cases_and_implementations():
    r = invoke("list")
    assert r.exit_code == 0
    for name in ("softmax", "attention", "conv_bn", "inductor-max-autotune", "sdpa-flash"):
        assert name in r.output


def test_results_formats(stored_run, tmp_path):
    r = invoke("results", "--db", stored_run)
    assert r.exit_code == 0 and "softmax" in r.output and "16x32" in r.output
    r = invoke("results", "--db", stored_run, "--format", "json")
    rows = json.loads(r.stdout)
    assert rows[0]["case_name"] == "softmax" and rows[0]["status"] == "ok"
    out = tmp_path / "cells.csv"
    r = invoke("results", "--db", stored_run, "--format", "csv", "-o", str(out))
    assert r.exit_code == 0 and out.read_text().startswith("id,") or "case_name" in out.read_text()


def test_strict_fails_on_a_mismatch(db, tmp_path):
    plugin = tmp_path / "wrong.py"
    plugin.write_text(
        "import torch, fusebench\n"
        "@fusebench.case(inputs=lambda s, dt, dev, seed: (fusebench.randn(s, dt, dev, seed),), shapes=[(8, 8)],\n"
        "                reference=lambda x: x * 2)\n"
        "def off_by_one(x):\n"
        "    return x * 2 + 1\n")
    args = ["run", "off_by_one", "--plugin", str(plugin), "--impl", "eager", "--db", db, "--no-isolate",
            "--metrics", "none"]
    assert invoke(*args).exit_code == 0  # a completed run exits 0 whatever its cells' statuses
    r = invoke(*args, "--strict")
    assert r.exit_code == 1 and "mismatch" in r.output


def test_show_one_cell_and_its_bad_input():
    r = invoke("show", "softmax", "--shape", "32x48", "--impl", "inductor", "--code-lines", "5")
    assert r.exit_code == 0, r.output
    assert "time_us" in r.output and "cpp_fused" in r.output  # metrics and Inductor's generated code
    r = invoke("show", "softmax", "--shape", "32x", "--impl", "eager")
    assert r.exit_code == 2 and "malformed shape" in r.output


def test_report_and_compare_commands(stored_run, tmp_path):
    html = tmp_path / "r.html"
    r = invoke("report", "--db", stored_run, "-o", str(html))
    assert r.exit_code == 0 and html.exists() and "softmax" in html.read_text()
    r = invoke("compare", "1", "1", "--db", stored_run, "-o", str(tmp_path / "c.html"), "--fail-above", "5")
    assert r.exit_code == 0 and "1 cells timed in both runs" in r.output
    r = invoke("compare", "1", "7", "--db", stored_run, "-o", str(tmp_path / "c.html"))
    assert r.exit_code == 2 and "no run 7" in r.output
    r = invoke("report", "--db", stored_run, "--run", "1-2", "-o", str(html))
    assert r.exit_code == 2 and "no run 2" in r.output
    r = invoke("report", "--db", stored_run, "--run", "2-1", "-o", str(html))
    assert r.exit_code == 2 and "bad run id" in r.output


def test_bad_request_creates_no_store(tmp_path):
    db = tmp_path / "never.db"
    for args in (["run", "sofmax"], ["run", "softmax", "--gpus", "x"], ["run", "softmax", "--device", "tpu"]):
        r = invoke(*args, "--db", str(db))
        assert r.exit_code == 2, r.output
    assert not db.exists()


def test_merge_command(stored_run, tmp_path):
    a, b = stored_run, str(tmp_path / "b.db")
    assert invoke("run", "softmax", "--shapes", "8x8", "--impl", "eager", "--db", b, "--no-isolate",
                  "--metrics", "none").exit_code == 0
    r = invoke("merge", b, "--db", a)
    assert r.exit_code == 0 and "runs 1 -> 2" in r.output, r.output
    r = invoke("merge", str(tmp_path / "missing.db"), "--db", a)  # checked before anything is written
    assert r.exit_code == 2 and "no results database" in r.output
    assert "2" in invoke("runs", "--db", a).output


def test_python_dash_m_runs_the_cli():
    # `python -m fusebench` works from a checkout without the console script (PYTHONPATH only)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    r = subprocess.run([sys.executable, "-m", "fusebench", "list"], capture_output=True, text=True, env=env, cwd=root)
    assert r.returncode == 0 and "softmax" in r.stdout, r.stderr
