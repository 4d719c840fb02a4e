"""bench/paired.py and the interleaved timing under it (measure.timing.time_interleaved)."""
import csv
import importlib.util
import os
import pathlib
import time

import numpy as np
import pytest
import torch

from fusebench.measure.timing import TimingSettings, time_interleaved

gpu = pytest.mark.gpu
# tests/conftest.py sets TRITON_INTERPRET=1 when there is no GPU
DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0") else "cpu"
ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("paired", ROOT / "bench" / "paired.py")
paired = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(paired)


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
                                           (["softmax", "8x8", "--impls", "triton"], "two implementations"),
                                           (["softmax", "8x8", "--impls", "triton,nosuch"], "unknown implementation")])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert paired.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_runs_end_to_end_and_appends_csv(tmp_path, capsys):
    out = tmp_path / "p.csv"
    for _ in range(2):
        assert paired.main(["softmax", "16x40", "--impls", "eager,memcpy", "--rounds", "4", "--device", "cpu",
                            "--csv", str(out)]) == 0
    text = capsys.readouterr().out
    assert "memcpy" in text and "us" in text
    lines = out.read_text().splitlines()
    assert lines[0].startswith("case,shape") and len(lines) == 3


@gpu
def test_gpu_paired_timing_finds_a_call_twice_as_long():
    x = torch.randn(1 << 22, device="cuda")
    once, twice = (lambda: x.mul(2)), (lambda: (x.mul(2), x.mul(2)))
    a, b = time_interleaved([once, twice], "cuda", TimingSettings(), rounds=40)
    speedup, lo, hi = paired.speedup_interval(a, b)
    assert 1.6 < lo <= speedup <= hi < 2.4
    same = paired.speedup_interval(*time_interleaved([once, once], "cuda", TimingSettings(), rounds=40))
    assert 0.95 < same[1] <= same[2] < 1.05


def test_records_the_plan_our_kernel_chose(tmp_path):
    # the triton implementation's note after its first call (the autotuned plan on a GPU; here the
    # interpreter's heuristic choice) goes with the timings, so that runs can be told apart
    out = tmp_path / "p.csv"
    assert paired.main(["pointwise_chain", "16x40", "--impls", "triton,eager", "--rounds", "2", "--device", DEVICE,
                        "--csv", str(out)]) == 0
    row = next(csv.DictReader(out.open()))
    assert row["a_plan"].startswith("tiles ") and "warps" in row["a_plan"]
