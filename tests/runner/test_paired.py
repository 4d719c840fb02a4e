"""`fusebench paired` (fusebench.runner.paired) and the interleaved timing under it
(measure.timing.time_interleaved)."""
import csv
import os
import time

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from fusebench.cli import app
from fusebench.runner import paired
from fusebench.measure.timing import TimingSettings, time_interleaved

gpu = pytest.mark.gpu
# tests/conftest.py sets TRITON_INTERPRET=1 when there is no GPU
DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0") else "cpu"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, ["paired", *args])


def test_interleaved_order_reverses_every_round():
    calls = []
    fns = [lambda: calls.append("a"), lambda: calls.append("b")]
    samples = time_interleaved(fns, "cpu", TimingSettings(), rounds=3)
    assert [len(s) for s in samples] == [3, 3]
    assert calls == ["a", "b"] + ["a", "b", "b", "a", "a", "b"]  # warm-up, then AB BA AB


def test_interleaved_host_timings_tell_a_slower_call():
    a, b = time_interleaved([lambda: time.sleep(2e-3), lambda: time.sleep(1e-3)], "cpu", TimingSettings(), rounds=5)
    assert np.median(a) > np.median(b) + 500  # us


def test_speedup_interval_and_verdict():
    rng = np.random.default_rng(1)
    a = 10 + rng.normal(0, 0.1, 200)  # A takes 10 us, B 9: A is 0.9x B
    lo_hi = paired.speedup_interval(a, 9 + rng.normal(0, 0.1, 200))
    assert lo_hi[1] <= lo_hi[0] <= lo_hi[2] and abs(lo_hi[0] - 0.9) < 0.01 and lo_hi[2] < 0.95
    assert paired.verdict(*lo_hi[1:], 0.95) == "below"
    assert paired.verdict(0.96, 1.1, 0.95) == "not below"
    assert paired.verdict(0.93, 0.97, 0.95) == "undecided"


@pytest.mark.parametrize("argv, message", [(["nosuch", "8x8"], "unknown case"),
                                           (["softmax", "8y8"], "malformed shape"),
                                           (["softmax", "8x8", "--impl", "triton"], "two implementations"),
                                           (["softmax", "8x8", "--impl", "triton,nosuch"], "unknown implementation"),
                                           (["softmax", "8x8", "--dtype", "fp8"], "unknown dtype"),
                                           (["softmax", "8x8", "--rounds", "1"], "--rounds must be from 2 to 100,000"),
                                           (["softmax", "8x8", "--device", "tpu"], "not available here"),
                                           (["softmax", "8x8", "--csv", "/nonexistent/dir/p.csv"], "does not exist")])
def test_bad_input_is_one_line_and_exit_2(argv, message):
    r = invoke(*argv)
    assert r.exit_code == 2, r.output
    err = r.output.strip()
    assert message in err and err.startswith("fusebench: error:") and "\n" not in err


def test_runs_end_to_end_and_appends_csv(tmp_path):
    out = tmp_path / "p.csv"
    for _ in range(2):
        r = invoke("softmax", "16x40", "--impl", "eager,memcpy", "--rounds", "4", "--device", "cpu", "--csv", str(out))
        assert r.exit_code == 0, r.output
        assert "median eager" in r.output and " us, memcpy " in r.output and "speedup of eager over memcpy" in r.output
        assert "95% interval [" in r.output and "verdict: " in r.output
    lines = out.read_text().splitlines()
    assert lines[0] == ",".join(paired.CSV_FIELDS) and len(lines) == 3
    row = next(csv.DictReader(out.open()))
    assert float(row["lo"]) <= float(row["speedup"]) <= float(row["hi"])
    assert row["verdict"] in ("below", "not below", "undecided")


def test_a_wrong_implementation_is_reported_not_timed_and_exits_1(tmp_path):
    plugin = tmp_path / "wrong_case.py"
    plugin.write_text(
        "import fusebench\n"
        "@fusebench.case(inputs=lambda shape, dtype, device, seed: (fusebench.randn(shape, dtype, device, seed),),\n"
        "                shapes=[(8, 8)], reference=lambda x: x * 3)\n"
        "def paired_wrong_case(x):\n"
        "    return x * 2\n")
    from fusebench.cases.base import _REGISTRY

    try:
        r = invoke("paired_wrong_case", "8x8", "--impl", "eager,eager", "--rounds", "2", "--device", "cpu",
                   "--plugin", str(plugin))
    finally:
        _REGISTRY.pop("paired_wrong_case", None)
    assert r.exit_code == 1, r.output
    assert "eager wrong:" in r.output and "x the tolerance" in r.output and "not timed: 8x8" in r.output


def test_records_the_plan_our_kernel_chose(tmp_path):
    # the triton implementation's note after its first call (the autotuned plan on a GPU; here the
    # interpreter's heuristic choice) goes with the timings, so that runs can be told apart
    out = tmp_path / "p.csv"
    r = invoke("pointwise_chain", "16x40", "--impl", "triton,eager", "--rounds", "2", "--device", DEVICE,
               "--csv", str(out))
    assert r.exit_code == 0, r.output
    row = next(csv.DictReader(out.open()))
    assert row["a_plan"].startswith("tiles ") and "warps" in row["a_plan"]
    assert f"triton: {row['a_plan']}" in r.output


@gpu
def test_gpu_paired_timing_finds_a_call_twice_as_long():
    x = torch.randn(1 << 22, device="cuda")
    once, twice = (lambda: x.mul(2)), (lambda: (x.mul(2), x.mul(2)))
    a, b = time_interleaved([once, twice], "cuda", TimingSettings(), rounds=40)
    speedup, lo, hi = paired.speedup_interval(a, b)
    assert 1.6 < lo <= speedup <= hi < 2.4
    same = paired.speedup_interval(*time_interleaved([once, once], "cuda", TimingSettings(), rounds=40))
    assert 0.95 < same[1] <= same[2] < 1.05
