"""Flags a user must see: cells timed while the CPU was busy, fractions of a ceiling beyond what a
ceiling allows, mismatched cells timed anyway and cells less accurate than eager -- in the
terminal summary and the report, and never in a headline figure.  Also the report's layout of a
handful of shapes (a list, not a sparse grid) and its colour-bar labels (wrapped, not cut)."""
from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from fusebench.report import heatmap as hm
from fusebench.report import render_report
from fusebench.report.grid import place
from fusebench.report.html import case_section
from fusebench.report.judge import CEILING_MARGIN, beyond_ceiling
from fusebench.store import Store
from fusebench.summary import print_summary

ENV = {"device": "cpu", "device_name": "x86_64 (synthetic)", "torch": "2.13.0"}
LOAD = {"samples": [{"at": "start", "cpus": 2, "loadavg": [3.0, 2.0, 1.0],
                     "cpu_pressure_pct": {"avg10": 60.0, "avg60": 40.0, "avg300": 10.0}}]}


def _cell(impl, shape, t, status="ok", **extra):
    return dict(case_name="softmax", impl=impl, shape=shape, dtype="fp32", requested_dtype="fp32", device="cpu",
                status=status, time_us=t, time_spread=0.01, under_load=0, err_vs_eager=1.0, tol_ratio=0.01,
                max_rel_err=1e-7, **extra)


def cells():
    rows = []
    for shape, f in (("256x256", 1.0), ("512x512", 1.0), ("1024x1024", 1.0), ("2048x2048", 1.0)):
        rows += [_cell("eager", shape, 100.0 * f), _cell("inductor", shape, 50.0 * f), _cell("memcpy", shape, 40.0 * f)]
    rows[0]["time_us"] = 12000.0  # eager 256x256 timed in a busy moment: 240x inductor's, impossible
    rows[0].update(under_load=1, cpu_pressure=0.9)
    rows[4]["time_us"] = 4.0  # inductor 512x512 at 1000% of its copy: a disturbed measurement
    rows[7].update(status="mismatch", reason="error 30x the tolerance", tol_ratio=30.0, time_us=60.0)  # inductor 1024
    rows[10].update(err_vs_eager=12.0)  # inductor 2048: right, but 12x eager's error
    return rows


@pytest.fixture
def run(tmp_path):
    store = Store.open(str(tmp_path / "flags.db"))
    run_id = store.start_run(ENV, {"cases": ["softmax"]}, {"rep_ms": 50})
    for c in cells():
        store.add_cell(run_id, c)
    with store.con:
        store.con.execute("UPDATE runs SET load=? WHERE id=?", (json.dumps(LOAD), run_id))
    store.finish_run(run_id)
    yield store, run_id
    store.close()


def test_beyond_ceiling_allows_a_little_and_the_noise():
    assert not beyond_ceiling(100.0 * (1 + CEILING_MARGIN) - 1)  # a better kernel than the ceiling's
    assert beyond_ceiling(100.0 * (1 + CEILING_MARGIN) + 1)
    assert not beyond_ceiling(115.0, spread=0.05, ceiling_spread=0.02)  # within the cells' own noise
    assert beyond_ceiling(12023.0, 0.01, 0.01) and not beyond_ceiling(None)


def test_terminal_summary_marks_every_flag(run):
    import fusebench

    store, run_id = run
    df = fusebench.results(run_id, store.path)
    buf = io.StringIO()
    print_summary(df, Console(file=buf, width=200, color_system=None), baseline="eager")
    text = buf.getvalue()
    assert "12.00 ms ±1% L!" in text  # timed while the CPU was busy
    assert "1000%?" in text and "above the ceiling by more than a ceiling allows" in text
    assert "mismatch 60.0 µs" in text and "timed anyway" in text  # both verdicts
    assert "inductor 12×eager's error" in text
    assert "warning: at the run's start, some task waited for a CPU 40% of the last minute" in text
    assert "1 of 12 timed cell(s) were measured while the CPU was busy" in text


def test_report_leaves_flagged_cells_out_of_its_headlines(run, tmp_path):
    store, run_id = run
    rows = store.cells(run_id)
    section = case_section("softmax", place(rows)[0], None, None)
    [pair] = [p for p in section["pairs"] if p["impl"] == "inductor"]
    [d] = pair["by_dtype"]
    # 256x256 (eager under load) and 512x512 (inductor beyond its ceiling) are flagged and left out;
    # 1024x1024 is a mismatch, never compared; the headline is 2048x2048's 2x alone
    assert d["flagged"] == 2 and d["gpu"]["n"] == 1 and d["gpu"]["geomean"] == pytest.approx(2.0)
    [ceiling] = [r for r in section["ceiling_rows"] if r["impl"] == "inductor"]
    assert ceiling["left_out"] == 1 and ceiling["best"][1] == pytest.approx(80.0)
    assert section["flag_counts"] == {"under load": 1, "beyond ceiling": 1, "mismatch (timed)": 1,
                                      "> 4× eager's error": 1}
    whys = [c.text for r in section["flagged"].rows for c in r]
    assert any("CPU was busy (some task waited for a CPU 90%" in w for w in whys)
    assert any("1000% of its ceiling" in w for w in whys) and any("12× eager's" in w for w in whys)
    with open(render_report(store, run_id, str(tmp_path / "r.html")), encoding="utf-8") as f:
        html = f.read()
    assert "Flagged cells" in html and "flagged, left out" in html and "Warning: at the run" in html
    assert "240" not in html.split("Summary", 1)[1].split("Environment", 1)[0]  # no impossible headline


def test_a_handful_of_shapes_is_a_list_not_a_sparse_grid():
    diagonal = pd.DataFrame([[1.5, np.nan], [np.nan, 0.8]], index=[1024, 8192], columns=[1024, 8192])
    full = pd.DataFrame([[1.5, 1.1], [0.9, 0.8]], index=[1024, 8192], columns=[1024, 8192])
    assert hm.sparse(diagonal) and not hm.sparse(full)
    assert not hm.sparse(pd.DataFrame([[1.0, 2.0, 3.0]], index=[8], columns=[1, 2, 3]))  # one row is a list already
    svg = _svg(hm.heatmap(diagonal, None, hm.SPEEDUP, title="t", row_title="dim0", col_title="dim1",
                          colorbar_label="speedup"))
    assert "1024 × 1024" in svg and "8192 × 8192" in svg and "1.50" in svg and "0.80" in svg


def test_colour_bar_labels_are_wrapped_to_the_figure():
    label = "% of the case's ceiling timed in the same run = time(ceiling) / time(impl)\nmemory-bound cases: " \
            "a copy of the minimum bytes (the goal is 100%); GEMM cases: torch.mm"
    wrapped = hm.wrap_label(label, 4.4)
    assert all(len(line) <= int(4.4 / 0.065) for line in wrapped.split("\n"))
    assert wrapped.replace("\n", " ").split() == label.replace("\n", " ").split()


def _svg(uri: str) -> str:
    import base64

    return base64.b64decode(uri.split(",", 1)[1]).decode("utf-8")
