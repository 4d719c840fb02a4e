"""`compare` against run-to-run noise: run B's times are normalised by the two runs' reference
workloads, a run whose machine changed speed while it measured is not judged, and changes under
--min-change are no changes.  The busy machine is simulated: every time of run B and its reference
scaled by one factor (a host slowed as a whole), with fresh noise in every repetition."""
from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from fusebench.cli import app
from fusebench.report.compare import compare_runs
from fusebench.report.compare_text import markdown, to_json, verdict
from fusebench.store import Store

ENV = {"device": "cpu", "device_name": "x86_64 (synthetic)", "torch": "2.13.0", "git_commit": "abc1234"}
SHAPES = ["256x256", "256x1024", "1024x256", "1024x1024", "2048x2048"]
IMPLS = {"eager": 1.0, "inductor": 0.6, "triton": 0.55}
runner = CliRunner()


def _stats(median: float, rng, n: int = 60, noise: float = 0.02) -> dict:
    """A cell's or a reference workload's time columns: n repetitions around `median`."""
    samples = median * (1 + noise * rng.standard_normal(n)).clip(0.9, 1.2)
    q20, q25, q50, q75, q80 = np.percentile(samples, [20, 25, 50, 75, 80])
    return dict(time_us=float(q50), time_q20_us=float(q20), time_q80_us=float(q80), time_reps=n,
                time_spread=float((q75 - q25) / q50), time_samples_us=json.dumps([float(f"{t:.5g}") for t in samples]))


def _reference(rng, factor: float = 1.0, end_factor: float = 1.0, copy: float = 1.0) -> str:
    samples = []
    for at, f in (("start", factor), ("end", factor * end_factor)):
        samples.append({"at": at, "time": "2026-11-28T00:00:00", "copy": _stats(900.0 * f * copy, rng),
                        "gemm": _stats(400.0 * f, rng)})
    return json.dumps({"device": "cpu", "threads": 2, "workloads": {}, "samples": samples})


def make_run(store: Store, seed: int, factor: float = 1.0, slower: dict | None = None,
             reference: bool = True, end_factor: float = 1.0, copy: float = 1.0) -> int:
    """A run of 3 implementations x 5 shapes; every time x `factor` (its reference too), the
    implementations in `slower` x their own factor on top (their reference unchanged)."""
    rng = np.random.default_rng(seed)
    run_id = store.start_run(ENV, {"cases": ["softmax"], "shapes": "quick"}, {"rep_ms": 50})
    for shape in SHAPES:
        d0, d1 = map(int, shape.split("x"))
        for impl, f in IMPLS.items():
            t = 0.02 * d0 * d1 * f * factor * (slower or {}).get(impl, 1.0)
            store.add_cell(run_id, dict(case_name="softmax", impl=impl, shape=shape, dtype="fp32",
                                        requested_dtype="fp32", device="cpu", status="ok", **_stats(t, rng)))
    if reference:
        with store.con:
            store.con.execute("UPDATE runs SET reference=? WHERE id=?",
                              (_reference(rng, factor, end_factor, copy), run_id))
    store.finish_run(run_id)
    return run_id


@pytest.fixture
def store(tmp_path):
    with Store.open(str(tmp_path / "runs.db")) as s:
        yield s


def test_same_commit_on_a_busy_machine_passes(store):
    quiet = make_run(store, seed=1)
    busy = make_run(store, seed=2, factor=1.5)  # the whole run 1.5x slower, its reference too
    result = compare_runs(store, quiet, store, busy)
    assert result.normalization.applied and result.normalization.factor == pytest.approx(1.5, rel=0.03)
    assert result.refused is None
    assert verdict(result, 5.0)[0] == 0 and len(result.real_regressions(5.0)) == 0
    # The same pair, compared as measured, would have failed every cell: the normalisation is what passes it.
    raw = compare_runs(store, quiet, store, busy, normalize=False)
    assert verdict(raw, 5.0)[0] == 1 and len(raw.real_regressions(5.0)) == 15


def test_a_slower_implementation_still_fails(store):
    base = make_run(store, seed=1)
    slow = make_run(store, seed=3, slower={"inductor": 1.3})  # one implementation 1.3x, reference unchanged
    result = compare_runs(store, base, store, slow)
    real = result.real_regressions(5.0)
    assert verdict(result, 5.0)[0] == 1
    assert set(real["impl"]) == {"inductor"} and len(real) == len(SHAPES)
    assert real["regression_pct"].between(25, 35).all()


def test_a_slower_implementation_fails_on_a_busy_machine_too(store):
    base = make_run(store, seed=1)
    slow = make_run(store, seed=4, factor=1.4, slower={"inductor": 1.3})
    result = compare_runs(store, base, store, slow)
    assert set(result.real_regressions(5.0)["impl"]) == {"inductor"}
    assert verdict(result, 5.0)[0] == 1


def test_a_run_whose_machine_changed_speed_is_not_judged(store):
    base = make_run(store, seed=1)
    drifted = make_run(store, seed=5, end_factor=1.4)  # its end reference 1.4x its start's
    result = compare_runs(store, base, store, drifted)
    assert result.refused and "changed while it measured" in result.refused
    code, line = verdict(result, 5.0)
    assert code == 3 and line.startswith("not judged")
    # a drift within --min-change is not a change
    small = make_run(store, seed=6, end_factor=1.02)
    assert compare_runs(store, base, store, small).refused is None


def test_references_that_disagree_normalise_no_more_than_they_require(store):
    base = make_run(store, seed=1)
    odd = make_run(store, seed=8, copy=2.0)  # its copy reference 2x, its GEMM and its cells unchanged
    result = compare_runs(store, base, store, odd)
    norm = result.normalization
    assert norm.applied and norm.factor == 1.0 and norm.lo < 1.05 and norm.hi > 1.9
    assert "the workloads disagree" in norm.note and not result.cells["real"].any()
    assert result.geomean_speedup == pytest.approx(1.0, abs=0.02)


def test_min_change_is_the_threshold_of_practical_significance(store):
    base = make_run(store, seed=1)
    nudged = make_run(store, seed=7, slower={"eager": 1.04})  # 4%: sure, but small
    assert set(compare_runs(store, base, store, nudged, min_change_pct=3.0).cells.query("real")["impl"]) == {"eager"}
    assert not compare_runs(store, base, store, nudged, min_change_pct=5.0).cells["real"].any()


def test_runs_without_references_compare_as_measured_with_a_note(store):
    old = make_run(store, seed=1, reference=False)
    new = make_run(store, seed=2, factor=1.5)
    result = compare_runs(store, old, store, new)
    assert not result.normalization.applied
    assert any("no reference workload" in n and "compared as measured" in n for n in result.notes)
    assert len(result.real_regressions(5.0)) == 15  # as before references existed


def test_other_devices_are_not_normalised(store):
    a = make_run(store, seed=1)
    b = make_run(store, seed=2, factor=1.5)
    with store.con:
        store.con.execute("UPDATE runs SET device_name='another CPU' WHERE id=?", (b,))
    result = compare_runs(store, a, store, b)
    assert not result.normalization.applied and any("different devices" in n for n in result.notes)


def test_formats_json_markdown_and_table(store, tmp_path):
    db = store.path
    a = make_run(store, seed=1)
    b = make_run(store, seed=3, slower={"inductor": 1.3})
    data = to_json(compare_runs(store, a, store, b), 5.0)
    assert data["format"] == "fusebench-compare" and data["verdict"]["exit_status"] == 1
    assert {r["impl"] for r in data["regressions"]} == {"inductor"} and data["normalization"]["applied"]
    text = markdown(compare_runs(store, a, store, b), 5.0)
    assert text.startswith("### fusebench compare: run 1 → run 2 (failed)") and "| softmax | inductor |" in text

    r = runner.invoke(app, ["compare", "--latest", "--db", db, "--format", "json", "--fail-above", "5"])
    assert r.exit_code == 1
    payload = json.loads(r.stdout)
    assert (payload["run_a"]["run"], payload["run_b"]["run"]) == (a, b)
    r = runner.invoke(app, ["compare", str(a), str(b), "--db", db, "--format", "markdown"])
    assert r.exit_code == 0 and r.stdout.startswith("### fusebench compare")  # no threshold: nothing judged


def test_cli_table_and_the_page_on_request(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = make_run(store, seed=1)
    r = runner.invoke(app, ["compare", str(a), str(a), "--db", store.path, "--fail-above", "5"])
    assert r.exit_code == 0, r.output
    assert "per case and implementation" in r.stdout and "no cell regressed" in r.stdout
    assert not (tmp_path / "compare.html").exists()  # the page only with -o
    r = runner.invoke(app, ["compare", str(a), str(a), "--db", store.path, "-o", str(tmp_path / "c.html")])
    assert r.exit_code == 0 and (tmp_path / "c.html").exists() and "wrote" in r.stdout


def test_cli_exit_3_when_not_judged_and_bad_input(store):
    db = store.path
    a = make_run(store, seed=1)
    b = make_run(store, seed=5, end_factor=1.4)
    r = runner.invoke(app, ["compare", str(a), str(b), "--db", db, "--fail-above", "5"])
    assert r.exit_code == 3 and "not judged" in r.stderr
    for args, message in ((["compare", "--latest", "1", "--db", db], "--latest compares the last two runs"),
                          (["compare", "1", "--db", db], "give two runs"),
                          (["compare", "1", "2", "--db", db, "--format", "xml"], "unknown --format"),
                          (["compare", "1", "2", "--db", db, "--min-change", "-1"], "--min-change must be")):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and message in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)


@pytest.mark.slow
def test_the_same_code_beside_cpu_burning_processes_is_no_regression(tmp_path):
    """Real runs: run B beside one CPU-bound process per CPU.  Its cells are flagged under load where
    the kernel reports CPU pressure, and `compare --fail-above 5` finds no regression: it passes, or
    says it cannot judge (the machine changed speed during a run), never a false regression."""
    import os
    import subprocess
    import sys

    import fusebench
    from fusebench.measure.load import read_pressure

    db = str(tmp_path / "busy.db")
    kw = dict(impls=["eager"], shapes=[(256, 256), (512, 1024)], db=db, isolate=False, metrics="none")
    fusebench.run(["softmax", "layernorm"], **kw)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        busy = fusebench.run(["softmax", "layernorm"], **kw)
    finally:
        for p in burners:
            p.kill()
            p.wait()
    if read_pressure() is not None:
        assert busy["under_load"].eq(1).all()
    r = runner.invoke(app, ["compare", "--latest", "--db", db, "--fail-above", "5"])
    assert r.exit_code in (0, 3), r.output


def test_one_reference_workload_moving_alone_is_not_the_machine():
    from fusebench.report.judge import drift

    rng = np.random.default_rng(7)
    record = {"samples": [{"at": "start", "time": "t0", "copy": _stats(1300.0, rng), "gemm": _stats(400.0, rng)},
                          {"at": "end", "time": "t1", "copy": _stats(900.0, rng), "gemm": _stats(400.0, rng)}]}
    assert drift(record, 0.03) is None  # a cold first copy; the GEMM did not move
    record["samples"][1]["gemm"] = _stats(280.0, rng)
    assert "copy reference took" in drift(record, 0.03) and "gemm reference took" in drift(record, 0.03)
