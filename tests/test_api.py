"""The Python API: fusebench.run() and fusebench.results() return the same columns, and a plain
script -- the README's snippet as it stands, without an `if __name__ == "__main__":` guard -- runs
its cells in worker processes and gets ok cells, its top level run once."""
from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fusebench
from fusebench.util import workers_skip_main
from fusebench.measure.timing import TimingSettings

README = Path(__file__).resolve().parents[1] / "README.md"
FAST = TimingSettings(warmup_ms=1, rep_ms=2, host_max_ms=5)


def readme_snippet() -> str:
    """The Python block under the README's "Python API" heading."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_run_and_results_return_the_same_columns(db):
    ran = fusebench.run(["softmax"], impls=["eager"], shapes="16x32", db=db, isolate=False, metrics="none",
                        timing=FAST)
    stored = fusebench.results(db=db)
    assert list(ran.columns) == list(stored.columns)
    assert {"run_id", "device_name", "torch", "shape_dim0", "threads", "under_load"} <= set(ran.columns)
    assert ran.attrs["run_id"] == stored.attrs["run_id"] and "warnings" in ran.attrs


def test_workers_skip_main_and_main_is_restored():
    main = sys.modules["__main__"]
    before = getattr(main, "__spec__", None)
    with workers_skip_main():
        # multiprocessing's spawn leaves a __main__ spec named "__main__" alone in the child
        from multiprocessing import spawn

        data = spawn.get_preparation_data("probe")
        assert data.get("init_main_from_name") == "__main__" and "init_main_from_path" not in data
    assert getattr(main, "__spec__", None) is before


def _run_script(tmp_path: Path, body: str, timeout: int) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(body, encoding="utf-8")
    env = {**os.environ, "FUSEBENCH_DB": str(tmp_path / "fusebench.db")}
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _cells(tmp_path: Path) -> list[tuple]:
    with sqlite3.connect(tmp_path / "fusebench.db") as con:
        return con.execute("SELECT impl, status, reason FROM cells").fetchall()


@pytest.mark.slow
def test_an_unguarded_script_runs_its_cells_in_workers_once(tmp_path):
    # The script's top level appends a line each time it runs: a worker that ran it again would
    # start a second run (and, before, crashed every cell).
    body = textwrap.dedent("""
        import fusebench
        with open("ran.txt", "a") as f:
            f.write("top level\\n")
        df = fusebench.run(["softmax"], impls=["eager"], shapes=[(64, 64)], metrics="none")
        print("statuses", sorted(set(df.status)), "columns", len(df.columns) == len(fusebench.results().columns))
        """)
    r = _run_script(tmp_path, body, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "statuses ['ok'] columns True" in r.stdout
    assert (tmp_path / "ran.txt").read_text().count("top level") == 1
    assert [c[:2] for c in _cells(tmp_path)] == [("eager", "ok")]


@pytest.mark.slow
def test_the_readme_api_snippet_runs_as_a_plain_script(tmp_path):
    snippet = readme_snippet()
    assert "fusebench.run(" in snippet and "fusebench.results()" in snippet and "__main__" not in snippet
    r = _run_script(tmp_path, snippet + "print('cells', sorted(set(df.status)))\n", timeout=900)
    assert r.returncode == 0, r.stderr
    cells = _cells(tmp_path)
    assert cells and all(status == "ok" for _, status, _ in cells), cells
    assert {impl for impl, _, _ in cells} == {"eager", "inductor"} and "cells ['ok']" in r.stdout
