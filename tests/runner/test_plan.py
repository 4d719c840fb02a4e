"""First contact: only cells that apply are planned, ceilings are shown as % of ceiling, spread is
stored and flagged, `compare` judges changes against the noise, the API takes what the CLI takes,
exports carry the run's identity and a column per shape axis, and --baseline moves the speedups."""
from __future__ import annotations

import io
import json
import os
import re
import sqlite3

import numpy as np
import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

import fusebench
from fusebench import settings
from fusebench.cli import app
from fusebench.measure.timing import TimingSettings, spread
from fusebench.report.columns import COLUMNS, describe, render_markdown
from fusebench.report.judge import change
from fusebench.runner.plan import default_impls, not_planned, plan_cells, resolve_shapes
from fusebench.store import CELL_COLUMNS, Store
from fusebench.summary import print_summary

runner = CliRunner()
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN = os.path.join(TESTS, "plugins", "doubled_softmax.py")
FAST = TimingSettings(warmup_ms=1, rep_ms=2, min_reps=5, max_reps=40, host_max_ms=30)


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def last_line(output: str) -> str:
    return [ln for ln in output.splitlines() if ln.strip()][-1]


# --------------------------------------------------------------------------------------------
# planning


def test_default_plan_has_only_cells_that_apply():
    cells = plan_cells(None, None, "quick", None, "cuda")
    by_case: dict[str, set] = {}
    for c in cells:
        by_case.setdefault(c.case, set()).add(c.impl)
    assert {i for i in by_case["attention"] if i.startswith("sdpa")} == {"sdpa-flash", "sdpa-efficient", "sdpa-cudnn"}
    for case, impls in by_case.items():
        assert case == "attention" or not any(i.startswith("sdpa") for i in impls), case
        epilogue = case in ("matmul_add", "matmul_relu", "matmul_add_relu")
        assert ("torch-mm" in impls) == epilogue and ("cublaslt" in impls) == epilogue, case
        assert ("memcpy" in impls) == (case in fusebench.cases.memory_bound_names()), case
    assert "inductor-max-autotune" not in {c.impl for c in cells}  # slow: by name or --impl all
    assert "inductor-max-autotune" in {c.impl for c in plan_cells(["softmax"], ["all"], "quick", None, "cuda")}


def test_cpu_default_leaves_out_what_cannot_run_here_and_says_why(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    settings.refresh()
    names = {i.name for i in default_impls("cpu")}
    assert {"eager", "inductor", "memcpy", "torch-mm"} <= names and not names & {"sdpa-flash", "cublaslt", "triton"}
    skipped = not_planned("cpu", ["softmax"])
    assert set(skipped) == {"triton"} and "TRITON_INTERPRET" in skipped["triton"]  # SDPA does not apply
    assert "sdpa-flash" in not_planned("cpu", ["attention"])


def test_peers_run_when_named_and_a_gpu_default_run_says_so(monkeypatch):
    # peers are left out of the default run and named in its "not run here" list; "default,peers"
    # adds every installed peer to the defaults
    from fusebench.impls.peers import PeerImplementation
    from fusebench.runner.plan import PEERS_BY_NAME, select_impls

    peer = next(i for i in fusebench.impls.all_impls() if isinstance(i, PeerImplementation) and i.applies(
        fusebench.cases.get_case("softmax")))
    monkeypatch.setattr(type(peer), "available", lambda self, device: None)
    cells = plan_cells(["softmax"], None, "quick", None, "cuda")
    assert peer.name not in {c.impl for c in cells} and {"eager", "triton"} <= {c.impl for c in cells}
    assert not_planned("cuda", ["softmax"])[peer.name] == PEERS_BY_NAME
    picked = [i.name for i in select_impls(["default", "peers"], "cuda")]
    assert peer.name in picked and picked[:len(default_impls("cuda"))] == [i.name for i in default_impls("cuda")]
    assert [i.name for i in select_impls(["eager", "peers", "eager"], "cuda")].count("eager") == 1


@pytest.mark.slow
def test_the_quick_shapes_run_on_the_quick_timing_budget(db):
    assert TimingSettings.for_shapes("quick").rep_ms < TimingSettings().rep_ms
    assert TimingSettings.for_shapes("grid") == TimingSettings() == TimingSettings.for_shapes("64x64")
    assert TimingSettings.for_shapes("quick", flush_mode="zero").flush_mode == "zero"
    fusebench.run(["softmax"], impls=["eager"], shapes="quick", dtype="fp32", db=db, isolate=False, metrics="none")
    fusebench.run(["softmax"], impls=["eager"], shapes=[(8, 16)], db=db, isolate=False, metrics="none")
    import sqlite3

    con = sqlite3.connect(db)
    budgets = [json.loads(t)["rep_ms"] for t, in con.execute("SELECT timing FROM runs ORDER BY id")]
    con.close()
    assert budgets == [TimingSettings.for_shapes("quick").rep_ms, TimingSettings().rep_ms]


def test_named_implementation_that_applies_nowhere_is_exit_2(db):
    r = invoke("run", "softmax", "layernorm", "--impl", "sdpa-flash", "--db", db, "--no-isolate")
    assert r.exit_code == 2 and "does not apply to softmax, layernorm" in last_line(r.output)
    assert not os.path.exists(db)
    r = invoke("run", "softmax", "--impl", "torch-mm", "--db", db)
    assert r.exit_code == 2 and "'torch-mm' does not apply" in last_line(r.output)
    # named where it applies to one of the cases: planned there only
    assert {(c.case, c.impl) for c in plan_cells(["softmax", "attention"], ["eager", "sdpa-flash"], "quick", None,
                                                 "cpu")} == {("softmax", "eager"), ("attention", "eager"),
                                                             ("attention", "sdpa-flash")}


def test_unsupported_is_said_once_per_implementation(db):
    df = fusebench.run(["attention"], impls=["eager", "sdpa-flash", "sdpa-cudnn"], shapes="1x2x16x8x0,1x2x32x8x1",
                       db=db, device="cpu", timing=FAST, isolate=False, metrics="none")
    assert set(df[df.impl != "eager"].status) == {"unsupported"}
    text = _summary(df)
    assert text.count("needs a CUDA GPU") == 2  # one line per implementation, not per cell
    assert "sdpa-flash (2 cells): needs a CUDA GPU" in text


# --------------------------------------------------------------------------------------------
# ceilings, spread, launch-bound cells in the terminal


def _summary(df, baseline="eager") -> str:
    buf = io.StringIO()
    print_summary(df, Console(file=buf, width=250, color_system=None), baseline=baseline)
    return buf.getvalue()


def _row(case, impl, shape, t, wall=None, spread_=0.02, **kw):
    return {"case_name": case, "impl": impl, "shape": shape, "dtype": "fp32", "device": "cuda", "status": "ok",
            "time_us": t, "wall_time_us": wall if wall is not None else t, "time_spread": spread_, "reason": None,
            "tol_ratio": 0.01, **kw}


def test_ceiling_is_a_percent_never_a_speedup():
    df = pd.DataFrame([_row("softmax", "eager", "64x64", 20.0), _row("softmax", "inductor", "64x64", 10.0),
                       _row("softmax", "memcpy", "64x64", 8.0),
                       _row("matmul_add", "eager", "64x64x64", 30.0), _row("matmul_add", "torch-mm", "64x64x64", 24.0)])
    text = _summary(df)
    assert "memcpy (ceiling)" in text and "torch-mm (ceiling)" in text
    assert re.search(r"10\.0 µs ±2% 2\.00× 80%", text)  # inductor: speedup over eager and % of memcpy
    assert re.search(r"20\.0 µs ±2% 40%", text)  # eager, the baseline: % of the ceiling, no speedup
    assert re.search(r"8\.0 µs ±2% +│", text)  # the ceiling: its time alone
    assert re.search(r"30\.0 µs ±2% 80%", text)  # eager on the GEMM: 80% of torch.mm
    assert "fastest: inductor at 1 of 1" in text and "fastest: memcpy" not in text


def test_noisy_cells_and_launch_bound_cells_are_flagged():
    df = pd.DataFrame([_row("softmax", "eager", "64x64", 20.0, wall=30.0),
                       _row("softmax", "triton", "64x64", 10.0, wall=45.0, spread_=0.31)])
    text = _summary(df)
    assert "±31%!" in text and "1 cell(s) too noisy to trust" in text
    assert "wall 0.67×" in text and "1 launch-bound cell(s)" in text
    quiet = _summary(df.assign(time_spread=0.01, wall_time_us=[30.0, 20.0]))
    assert "too noisy to trust (spread" not in quiet and "launch-bound cell" not in quiet and "%!" not in quiet


def test_baseline_changes_the_speedup_column():
    df = pd.DataFrame([_row("softmax", "eager", "64x64", 20.0), _row("softmax", "inductor", "64x64", 10.0),
                       _row("softmax", "triton", "64x64", 5.0)])
    over_eager, over_inductor = _summary(df), _summary(df, baseline="inductor")
    assert "5.0 µs ±2% 4.00×" in over_eager and "inductor (baseline)" not in over_eager
    assert "5.0 µs ±2% 2.00×" in over_inductor and "20.0 µs ±2% 0.50×" in over_inductor
    assert "inductor (baseline)" in over_inductor and "speedup over inductor" in over_inductor


def test_baseline_option_on_every_command(db):
    assert invoke("run", "softmax", "--shapes", "16x32", "--impl", "eager,inductor", "--db", db, "--no-isolate",
                  "--metrics", "none", "--baseline", "inductor").exit_code == 0
    r = invoke("results", "--db", db, "--baseline", "inductor")
    assert r.exit_code == 0 and "inductor (baseline)" in r.output
    r = invoke("report", "--db", db, "--baseline", "inductor", "-o", os.path.join(os.path.dirname(db), "r.html"))
    assert r.exit_code == 0
    html = open(os.path.join(os.path.dirname(db), "r.html"), encoding="utf-8").read()
    assert "eager vs inductor" in html and "inductor vs eager" not in html
    for cmd in (["results"], ["report"], ["compare", "1", "1"]):
        r = invoke(*cmd, "--db", db, "--baseline", "memcpy")
        assert r.exit_code == 2 and "is a ceiling" in last_line(r.output)
        r = invoke(*cmd, "--db", db, "--baseline", "eagr")
        assert r.exit_code == 2 and "unknown implementation 'eagr'" in last_line(r.output)


# --------------------------------------------------------------------------------------------
# spread stored, and compare against the noise


def test_timing_stores_every_repetition_and_its_spread(db):
    df = fusebench.run(["softmax"], impls=["eager"], shapes=[(32, 64)], db=db, timing=FAST, isolate=False,
                       metrics="none")
    row = df.iloc[0]
    samples = json.loads(row.time_samples_us)
    assert len(samples) == row.time_reps >= FAST.min_reps
    assert row.time_spread == pytest.approx(spread(samples), rel=1e-3, abs=1e-3)  # the samples are stored rounded
    assert min(samples) <= row.time_us <= max(samples)


def _noisy_run(store, rng, scale=1.0, impl_scale=None):
    """Stored cells whose repetitions are noisy (lognormal, ~8% spread): one run of a selection."""
    run_id = store.start_run({"device": "cpu", "device_name": "synthetic"}, {}, {})
    for impl in ("eager", "inductor"):
        for shape in ("64x64", "256x256", "1024x1024"):
            base = {"64x64": 10.0, "256x256": 40.0, "1024x1024": 400.0}[shape] * (0.7 if impl == "inductor" else 1)
            f = scale * (impl_scale or {}).get(impl, 1.0)
            samples = base * f * rng.lognormal(0.0, 0.06, size=200)
            # and the host's load between runs: the whole cell a few percent off
            samples *= 1 + rng.uniform(-0.04, 0.04)
            q20, q80 = np.percentile(samples, [20, 80])
            store.add_cell(run_id, dict(case_name="softmax", impl=impl, shape=shape, dtype="fp32", device="cpu",
                                        status="ok", time_us=float(np.median(samples)), time_q20_us=float(q20),
                                        time_q80_us=float(q80), time_reps=200, time_samples_us=samples.tolist(),
                                        time_spread=spread(samples)))
    store.finish_run(run_id)
    return run_id


def test_compare_within_the_noise_passes_and_a_real_slowdown_fails(db, tmp_path):
    rng = np.random.default_rng(1)
    store = Store.open(db)
    a, b = _noisy_run(store, rng), _noisy_run(store, rng)
    slow = _noisy_run(store, rng, impl_scale={"inductor": 1.5})
    store.close()
    out = str(tmp_path / "c.html")
    same = invoke("compare", a, b, "--db", db, "--fail-above", 5, "-o", out)
    assert same.exit_code == 0, same.output
    r = invoke("compare", a, slow, "--db", db, "--fail-above", 5, "-o", out)
    assert r.exit_code == 1
    named = [ln for ln in r.output.splitlines() if ln.strip().startswith("regressed")]
    assert len(named) == 3 and all("softmax inductor" in ln for ln in named)


def test_change_falls_back_to_quantiles_without_samples():
    a = {"time_us": 10.0, "time_q20_us": 9.5, "time_q80_us": 10.5}
    assert not change(a, {"time_us": 10.4, "time_q20_us": 10.0, "time_q80_us": 11.0}).real  # ranges overlap
    c = change(a, {"time_us": 12.0, "time_q20_us": 11.5, "time_q80_us": 12.5})
    assert c.real and c.method == "quantiles" and c.regression_pct == pytest.approx(20.0)


def test_a_plugin_implementation_twice_as_slow_is_caught(db, tmp_path, monkeypatch):
    out = str(tmp_path / "c.html")
    args = ("run", "softmax", "--impl", "test-doubled", "--shapes", "512x1024", "--db", db, "--no-isolate",
            "--metrics", "none")
    monkeypatch.setenv("FUSEBENCH_TEST_WORK", "1")
    r = invoke(*args, "--plugin", PLUGIN)
    assert r.exit_code == 0, r.output
    monkeypatch.setenv("FUSEBENCH_TEST_WORK", "2")
    assert invoke(*args).exit_code == 0
    # A shared 2-core host can change speed within a run, and compare rightly refuses to judge such a
    # run (tests/report/test_compare_noise.py); the subject here is the doubled work, so the runs'
    # reference records are dropped and the times compared as measured.
    with sqlite3.connect(db) as con:
        con.execute("UPDATE runs SET reference = NULL")
    r = invoke("compare", 1, 2, "--db", db, "--fail-above", 5, "-o", out)
    assert r.exit_code == 1, r.output
    assert "has no reference workload" in r.output
    assert re.search(r"regressed \d+\.\d% .*: softmax test-doubled 512x1024 fp32", r.output), r.output


# --------------------------------------------------------------------------------------------
# the API and the exported rows


def test_api_takes_shape_tuples_and_strings_like_the_cli(db):
    df = fusebench.run(["softmax"], impls="eager", shapes=[(16, 32), "8x8"], db=db, timing=FAST, isolate=False,
                       metrics="none")
    assert list(df["shape"]) == ["16x32", "8x8"] and (df.status == "ok").all()
    df = fusebench.run("softmax", impls=["eager"], shapes=(4, 4), db=db, timing=FAST, isolate=False, metrics="none")
    assert list(df["shape"]) == ["4x4"]
    with pytest.raises(ValueError, match="malformed shape"):
        fusebench.run(["softmax"], shapes=[(4, "a")], db=db)
    import inspect

    params = inspect.signature(fusebench.run).parameters
    assert params["metrics"].default == "default" and params["isolate"].default is None  # the CLI's defaults


def test_exported_rows_carry_the_run_and_numeric_dimensions(db, tmp_path):
    fusebench.run(["softmax", "matmul_add"], impls=["eager"], shapes="16x32", db=db, timing=FAST, isolate=False,
                  metrics="none")
    df = fusebench.results(db=db)
    for col in ("run_id", "device_name", "torch", "triton", "run_commit", "git_commit", "shape_dim0", "shape_M"):
        assert col in df.columns, col
    soft, mm = df[df.case_name == "softmax"].iloc[0], df[df.case_name == "matmul_add"].iloc[0]
    assert (soft.shape_dim0, soft.shape_dim1) == (16, 32) and pd.isna(soft.shape_M)
    assert (mm.shape_M, mm.shape_N, mm.shape_K) == (16, 32, 32)
    assert df.torch.iloc[0] == __import__("torch").__version__
    r = invoke("results", "--db", db, "--format", "csv", "-o", str(tmp_path / "r.csv"))
    assert r.exit_code == 0
    csv = pd.read_csv(tmp_path / "r.csv")
    assert list(csv.columns) == list(df.columns) and csv.shape_dim1.iloc[0] == 32


def test_every_column_is_described_and_the_doc_matches():
    import fusebench.metrics as metrics

    for name in metrics.ALL_METRICS:
        metrics.get_metric(name)
    from fusebench.report.columns import RUN_FIELDS

    for col in list(CELL_COLUMNS) + list(RUN_FIELDS) + ["shape_seqlen"]:
        assert describe(col), f"column {col!r} is not in report/columns.py"
    doc = os.path.join(TESTS, "..", "docs", "columns.md")
    with open(doc, encoding="utf-8") as f:
        assert f.read() == render_markdown(), "docs/columns.md is stale: regenerate it from report/columns.py"
    r = CliRunner().invoke(app, ["results", "--describe"], terminal_width=300)
    assert r.exit_code == 0
    for name, text in COLUMNS.items():
        assert name in r.output and text[:40] in " ".join(r.output.split()), name


def test_report_flags_noisy_and_launch_bound_cells(db, tmp_path):
    from fusebench.report import render_report

    store = Store.open(db)
    run_id = store.start_run({"device": "cuda", "device_name": "synthetic"}, {}, {})
    for row in (_row("conv_relu", "eager", "4x256x14x14x1024x1x1x1", 35.6, wall=55.5),
                _row("conv_relu", "triton", "4x256x14x14x1024x1x1x1", 15.8, wall=212.0, spread_=0.4),
                _row("softmax", "eager", "64x64", 20.0), _row("softmax", "triton", "64x64", 10.0),
                _row("softmax", "memcpy", "64x64", 8.0)):
        store.add_cell(run_id, {k: v for k, v in row.items() if v is not None})
    store.finish_run(run_id)
    html = open(render_report(store, run_id, str(tmp_path / "r.html")), encoding="utf-8").read()
    store.close()
    assert "Launch-bound (faster than eager on the device, slower from Python): 4x256x14x14x1024x1x1x1" in html
    assert "Cells too noisy to trust" in html and "spread % median · max" in html
    assert "% of ceiling" in html and "triton vs memcpy" not in html and "memcpy vs eager" not in html


def test_quick_2d_shapes_span_launch_bound_l2_resident_and_dram_bound():
    # fp32 bytes per tensor against the H100/H200 L2 (50 MiB): one small launch-bound shape, one
    # that stays in L2, one well above it; every (dim0, dim1) case uses that set on the GPU.
    from fusebench.cases.base import QUICK_2D

    mib = sorted(a * b * 4 / 2**20 for a, b in QUICK_2D)
    assert len(mib) == 3 and mib[0] <= 8 and 8 < mib[1] < 50 and mib[2] >= 200
    two_d = [c for c in fusebench.cases.all_cases()  # the built-in ones (tests register plugin cases too)
             if c.axes == ("dim0", "dim1") and c.fn.__module__.startswith("fusebench.cases.")]
    assert len(two_d) >= 10
    for case in two_d:
        assert resolve_shapes(case, "quick", "cuda") == QUICK_2D, case.name
