"""`fusebench overhead`: host overhead per cell from a crafted store, and triton's rule
wall_time <= max(1.1 x GPU time, eager's wall time)."""
import hashlib

import pytest
from typer.testing import CliRunner

from fusebench.cli import app
from fusebench.report.overhead import overhead_rows, summary_line, verdicts
from fusebench.store import Store

runner = CliRunner()


def cell(case, impl, shape, time_us=None, wall=None, status="ok", device="cuda", **extra):
    row = dict(case_name=case, impl=impl, shape=shape, dtype="fp32", requested_dtype="fp32", device=device,
               status=status, time_us=time_us, wall_time_us=wall, **extra)
    return {k: v for k, v in row.items() if v is not None}


CELLS = [
    # misses: 53.4 > max(1.1 x 6.5, 16.9)
    cell("softmax", "triton", "1024x1024", 6.5, 53.4), cell("softmax", "eager", "1024x1024", 8.4, 16.9),
    cell("softmax", "inductor", "1024x1024", 7.0, 58.3), cell("softmax", "memcpy", "1024x1024", 3.0, 9.0),
    # meets through eager's wall time: 30.0 <= max(10.67, 32.6)
    cell("matmul_add", "triton", "1024x1024x1024", 9.7, 30.0), cell("matmul_add", "eager", "1024x1024x1024", 13.6, 32.6),
    # meets through its own GPU time, no eager cell needed: 105 <= 110
    cell("layernorm", "triton", "8192x8192", 100.0, 105.0),
    # not available: triton failed (markup in the reason stays text)
    cell("conv_relu", "triton", "32x256x14x14x1024x1x1x1", status="error", reason="boom [bold]x[/bold]"),
    cell("conv_relu", "eager", "32x256x14x14x1024x1x1x1", 35.6, 55.5),
    # not available: triton's wall time not stored, with the reason from `na`
    cell("pointwise_chain", "triton", "1024x1024", 5.0, na={"wall_time": "no host timer here"}),
    cell("pointwise_chain", "eager", "1024x1024", 9.0, 20.0),
    # not available: over 1.1x its GPU time, and eager (which would decide) errored
    cell("double_softmax", "triton", "128x65536", 10.0, 40.0),
    cell("double_softmax", "eager", "128x65536", status="oom", reason="out of memory"),
]


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "fb.db")
    with Store.open(path) as store:
        run = store.start_run({"device": "cuda", "device_name": "synthetic"}, {}, {})
        for c in CELLS:
            store.add_cell(run, c)
        store.finish_run(run)
    return path


def by_case(db):
    with Store.open(db, create=False) as store:
        rows = overhead_rows(store.cells())
    return rows, {v.case: v for v in verdicts(rows)}


def test_rows_leave_out_ceilings_and_compute_wall_minus_gpu(db):
    rows, _ = by_case(db)
    assert "memcpy" not in set(rows["impl"])
    soft = rows[rows["case_name"] == "softmax"]
    assert list(soft["impl"]) == ["triton", "eager", "inductor"]  # triton first, then eager
    assert soft["overhead_us"].round(3).tolist() == [46.9, 8.5, 51.3]


def test_rule_meets_misses_and_says_why_it_cannot_judge(db):
    _, v = by_case(db)
    assert v["softmax"].meets is False and v["softmax"].limit_us == pytest.approx(16.9)
    assert v["matmul_add"].meets is True and v["matmul_add"].limit_us == pytest.approx(32.6)
    assert v["layernorm"].meets is True and v["layernorm"].limit_us == pytest.approx(110.0)
    assert v["conv_relu"].meets is None and "triton: error: boom" in v["conv_relu"].why
    assert v["pointwise_chain"].meets is None and "wall time not stored: no host timer here" in v["pointwise_chain"].why
    assert v["double_softmax"].meets is None and "eager's wall time is needed" in v["double_softmax"].why
    assert "oom: out of memory" in v["double_softmax"].why
    line = summary_line(list(v.values()))
    assert line.startswith("triton misses") and "1 of 3 cells judged; not available at 3: softmax 1024x1024 fp32" in line


def test_a_cpu_run_is_not_judged(tmp_path):
    path = str(tmp_path / "cpu.db")
    with Store.open(path) as store:
        run = store.start_run({"device": "cpu", "device_name": "synthetic"}, {}, {})
        for c in (cell("softmax", "triton", "64x64", 5.0, 9.0, device="cpu"),
                  cell("softmax", "eager", "64x64", 5.0, 6.0, device="cpu")):
            store.add_cell(run, c)
    (v,) = by_case(path)[1].values()
    assert v.meets is None and "CPU run" in v.why


def test_cli_reports_exit_0_and_with_fail_exit_1(db):
    before = hashlib.sha256(open(db, "rb").read()).hexdigest()
    r = runner.invoke(app, ["overhead", db])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "misses: wall 53.4 > 16.9 µs" in flat and "meets: wall 30.0 <= 32.6 µs" in flat
    assert "boom [bold]x[/bold]" in flat  # store text printed as text
    assert "memcpy" not in flat
    assert flat.count("triton misses") == 1 and "softmax 1024x1024 fp32" in flat.split("triton misses")[1]
    assert runner.invoke(app, ["overhead", "--db", db, "--run", "1", "--fail"]).exit_code == 1
    assert hashlib.sha256(open(db, "rb").read()).hexdigest() == before


def test_cli_fail_exits_0_when_every_judged_cell_meets(tmp_path):
    path = str(tmp_path / "ok.db")
    with Store.open(path) as store:
        run = store.start_run({"device": "cuda", "device_name": "synthetic"}, {}, {})
        for c in (cell("softmax", "triton", "64x64", 5.0, 5.2), cell("softmax", "eager", "64x64", 6.0, 20.0)):
            store.add_cell(run, c)
    r = runner.invoke(app, ["overhead", path, "--fail"])
    assert r.exit_code == 0 and "meets" in r.output and "at all 1 cells judged" in " ".join(r.output.split())


def test_missing_store_is_one_line_exit_2_and_creates_nothing(tmp_path):
    r = runner.invoke(app, ["overhead", str(tmp_path / "absent.db")])
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1 and r.stderr.startswith("fusebench: error: ")
    assert list(tmp_path.iterdir()) == []
