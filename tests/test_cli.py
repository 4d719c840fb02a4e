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
    r = invoke("merge", b, "--db", a)  # the same run again: not copied twice
    assert r.exit_code == 0 and f"{b}: run 1 is already in {a} as run 2: not copied again" in r.stdout, r.output
    assert sqlite3.connect(a).execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2
    r = invoke("merge", str(tmp_path / "missing.db"), "--db", a)  # checked before anything is written
    assert r.exit_code == 2 and "no results database" in r.output
    assert "2" in invoke("runs", "--db", a).output


def test_merge_refuses_a_source_with_values_readers_refuse_one_line_each(stored_run, tmp_path):
    import hashlib

    src = str(tmp_path / "src.db")
    assert invoke("run", "softmax", "--shapes", "8x8,8x16,8x24", "--impl", "eager", "--db", src, "--no-isolate",
                  "--metrics", "none").exit_code == 0
    con = sqlite3.connect(src)
    with con:
        con.execute("UPDATE cells SET time_us='fast' WHERE shape='8x8'")
        con.execute("UPDATE cells SET shape='huge', status='great' WHERE shape='8x16'")
        con.execute("INSERT INTO cells (run_id, case_name, impl, shape, dtype, device, status) "
                    "VALUES (5, 'softmax', 'eager', '4x4', 'fp32', 'cpu', 'ok')")  # its run row is missing
    con.close()
    before = hashlib.sha256(open(stored_run, "rb").read()).hexdigest()
    r = invoke("merge", src, "--db", stored_run)
    assert r.exit_code == 2 and r.stdout == "", r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 3 and all(line.startswith(f"fusebench: error: {src}: ") for line in lines), r.stderr
    assert "1 cell(s) of run 5, which has no row in the runs table" in lines[0]
    assert "holds 'fast' in time_us" in lines[1] and "shape 'huge'" in lines[2] and "status 'great'" in lines[2]
    assert lines[2].endswith("nothing merged (fix or delete these rows in the source first)")
    assert hashlib.sha256(open(stored_run, "rb").read()).hexdigest() == before


def test_version_names_fusebench_torch_and_triton():
    import torch

    import fusebench

    r = invoke("--version")
    assert r.exit_code == 0 and r.stdout.startswith(f"fusebench {fusebench.__version__} (torch {torch.__version__}, ")
    assert r.stdout.count("\n") == 1


def test_dry_run_prints_the_plan_and_an_estimate_and_touches_no_store(stored_run, tmp_path):
    import hashlib

    d = os.path.dirname(stored_run)
    before, files = hashlib.sha256(open(stored_run, "rb").read()).hexdigest(), sorted(os.listdir(d))
    r = invoke("run", "softmax", "--impl", "eager,inductor", "--shapes", "16x32,8x8", "--db", stored_run,
               "--dry-run")
    assert r.exit_code == 0, r.output
    flat = " ".join(r.stdout.split())
    assert "nothing is measured and no store is written" in flat and "eager 2, inductor 2" in flat
    assert "total: 4 cells; estimated duration ~" in flat and "an estimate, not a measurement" in flat
    # 16x32 eager was measured in the store: its seconds; the rest at the stated default
    assert "1 cell(s) at the median seconds of the same cell in earlier runs" in flat
    assert "1 at the median seconds of earlier cells of their case and implementation" in flat
    assert "2 at a default of 1 s a cell" in flat
    assert hashlib.sha256(open(stored_run, "rb").read()).hexdigest() == before and sorted(os.listdir(d)) == files
    never = tmp_path / "never.db"
    r = invoke("run", "softmax", "--impl", "eager", "--db", str(never), "--dry-run")
    assert r.exit_code == 0 and f"no store at {never} yet" in " ".join(r.stdout.split()) and not never.exists()


def test_progress_is_plain_lines_when_the_output_is_not_a_terminal(stored_run):
    r = invoke("run", "softmax", "--shapes", "8x8,8x16,8x24", "--impl", "eager", "--db", stored_run, "--no-isolate",
               "--metrics", "none")
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("run 2")]
    assert lines[0] == "run 2: 3 cells" and len(lines) == 4, r.stderr
    for n, line in enumerate(lines[1:], 1):
        assert line.startswith(f"run 2: {n}/3 cells (ok:{n}), 0:00:") and " elapsed; last: softmax eager 8x" in line
    assert "━" not in r.stderr  # no bar


def test_runs_tells_runs_apart_by_commit_request_and_device(stored_run):
    from fusebench.env import collect, git_commit

    r = CliRunner().invoke(app, ["runs", "--db", stored_run], terminal_width=200)
    assert r.exit_code == 0
    flat = " ".join(r.stdout.split())
    for word in ("commit", "request", "device", "softmax; eager; 16x32", collect("cpu")["device_name"]):
        assert word in flat, word
    assert (git_commit() or "") in flat


def test_exports_carry_their_schema_version(stored_run, tmp_path):
    import pandas as pd

    from fusebench.report.export import EXPORT_SCHEMA

    csv = tmp_path / "r.csv"
    assert invoke("results", "--db", stored_run, "--format", "csv", "-o", str(csv)).exit_code == 0
    rows = pd.read_csv(csv)
    assert rows.columns[0] == "export_schema" and set(rows.export_schema) == {EXPORT_SCHEMA}
    r = invoke("results", "--db", stored_run, "--format", "json")
    assert [row["export_schema"] for row in json.loads(r.stdout)] == [EXPORT_SCHEMA]
    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "columns.md"), encoding="utf-8").read()
    assert "| `export_schema` |" in doc


def test_list_shows_each_cases_arguments_and_names_a_plugin_for_an_unknown_one():
    r = invoke("list")  # not a terminal: 160 columns
    assert r.exit_code == 0 and "case(arguments)" in r.stdout
    assert "│ matmul_add(a, b, bias) " in r.stdout and "│ softmax(x) " in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 160
    r = invoke("run", "softmax", "--impl", "my-softmax")
    assert r.exit_code == 2
    assert r.stderr == ("fusebench: error: unknown implementation 'my-softmax'; registered in a plugin file? give it "
                        "with --plugin FILE\n")


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _interrupted(args, ready, tmp_path):
    """Run the CLI with `args`, SIGINT it once `ready()` holds; (exit status, stderr)."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "fusebench", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": ROOT, "FB_FAULT_DIR": str(tmp_path)})
    deadline = time.time() + 120
    while time.time() < deadline and not ready() and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


@pytest.mark.slow
def test_an_interrupt_names_the_run_to_resume_and_none_before_it_exists(tmp_path):
    faults = os.path.join(ROOT, "tests", "faults")
    db = str(tmp_path / "fb.db")
    slow_import = os.path.join(faults, "slow_import.py")
    code, err = _interrupted(["run", "softmax", "--plugin", slow_import, "--db", db, "--no-isolate"],
                             lambda: (tmp_path / "importing").exists(), tmp_path)
    assert code == 130 and err.strip() == "interrupted; no run was stored", err
    assert not os.path.exists(db)

    slow = os.path.join(faults, "slow.py")

    def two_cells():
        try:
            return sqlite3.connect(db).execute("SELECT COUNT(*) FROM cells").fetchone()[0] >= 2
        except sqlite3.Error:
            return False

    code, err = _interrupted(["run", "slow", "--plugin", slow, "--impl", "eager", "--db", db, "--no-isolate",
                              "--metrics", "none"], two_cells, tmp_path)
    assert code == 130, err
    assert (f"interrupted; run 1's finished cells are stored; complete it with `fusebench run --resume 1 --db {db} "
            f"--plugin {slow}`") in err
    assert "RUN_ID" not in err


def test_the_commit_is_read_without_writing_to_the_repository(tmp_path):
    import time

    from fusebench.env import read_commit

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    (repo / "f.txt").write_text("a\n")
    for args in (["init", "-q"], ["add", "f.txt"], ["commit", "-qm", "first"]):
        subprocess.run(git + args, check=True)
    head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    index = repo / ".git" / "index"
    time.sleep(1.1)
    os.utime(repo / "f.txt")  # the index's stat data is stale: a refreshing command would rewrite it
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    assert read_commit(str(repo)) == head
    (repo / "f.txt").write_text("b\n")
    assert read_commit(str(repo)) == head + "-dirty"
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
    assert not (repo / ".git" / "index.lock").exists()


def test_python_dash_m_runs_the_cli():
    # `python -m fusebench` works from a checkout without the console script (PYTHONPATH only)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    r = subprocess.run([sys.executable, "-m", "fusebench", "list"], capture_output=True, text=True, env=env, cwd=root)
    assert r.returncode == 0 and "softmax" in r.stdout, r.stderr
