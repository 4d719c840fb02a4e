"""The machine's load while a run measures: CPU pressure and load averages read, a cell's timing
watched and flagged when the CPU was busy, warning lines for a run, and the thread count each
cell runs with."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from fusebench.measure import load


def test_read_pressure_parses_the_some_line(tmp_path):
    f = tmp_path / "cpu"
    f.write_text("some avg10=6.74 avg60=4.52 avg300=2.20 total=14355449\n"
                 "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    assert load.read_pressure(str(f)) == {"avg10": 6.74, "avg60": 4.52, "avg300": 2.2, "total": 14355449}
    assert load.read_pressure(str(tmp_path / "absent")) is None
    f.write_text("garbage\n")
    assert load.read_pressure(str(f)) is None


def test_a_watched_timing_measures_the_pressure_over_it(monkeypatch):
    totals = iter([1_000_000, 1_000_000 + 40_000])  # 40 ms of stall ...
    monkeypatch.setattr(load, "read_pressure", lambda path=load.PSI_PATH: {"total": next(totals)})
    clock = iter([10.0, 10.1])  # ... over 100 ms of timing
    monkeypatch.setattr(load.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(load, "loadavg", lambda: (3.0, 2.0, 1.0))
    monkeypatch.setattr(load, "usable_cpus", lambda: 2)
    with load.watch(2) as seen:
        pass
    assert seen.cpu_pressure == pytest.approx(0.4) and seen.load_per_cpu == 1.5
    assert seen.under_load and seen.columns() == {"threads": 2, "cpu_pressure": 0.4, "load_per_cpu": 1.5,
                                                  "under_load": 1}


def test_the_under_load_rule():
    assert load.under_load(0.11, None) and not load.under_load(0.09, 5.0)  # pressure decides where measured
    # without it, the load average beyond the cell's own threads, against half the CPUs
    assert not load.under_load(None, 1.0, threads=2, cpus=2)  # the cell's own two threads
    assert load.under_load(None, 2.0, threads=2, cpus=2)  # two more runnable tasks
    assert not load.under_load(None, None)


def test_run_warnings_from_samples_and_cells():
    busy = {"at": "start", "cpus": 2, "loadavg": [3.1, 2.0, 1.0], "cpu_pressure_pct": {"avg10": 50.0, "avg60": 35.0,
                                                                                        "avg300": 9.0}}
    quiet = {"at": "end", "cpus": 2, "loadavg": [0.2, 0.2, 0.2], "cpu_pressure_pct": {"avg10": 0.0, "avg60": 1.0,
                                                                                       "avg300": 1.0}}
    cells = pd.DataFrame({"time_us": [1.0, 2.0, None], "under_load": [1, 0, None], "threads": [2, 2, 2]})
    lines = load.run_warnings(json.dumps({"samples": [busy, quiet]}), cells)
    assert lines[0].startswith("at the run's start, some task waited for a CPU 35% of the last minute")
    assert lines[1].startswith("1 of 2 timed cell(s) were measured while the CPU was busy")
    assert "this run used 2 threads" in lines[2] and "OMP_NUM_THREADS=1" in lines[2]
    assert "threads" not in load.run_warnings({"samples": [busy]}, cells.assign(threads=1))[-1]
    assert load.run_warnings(json.dumps({"samples": [quiet]}), cells.assign(under_load=0)) == []
    no_psi = {"at": "end", "cpus": 2, "loadavg": [4.0, 1.0, 1.0], "cpu_pressure_pct": None}
    assert "load average was 4.00 on 2 CPUs" in load.run_warnings({"samples": [no_psi]})[0]
    assert load.run_warnings(None) == [] and load.run_warnings("not json") == []


def test_a_cpu_run_takes_one_thread_unless_omp_num_threads_says_otherwise(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert load.default_threads("cpu") == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert load.default_threads("cpu") == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "many")
    assert load.default_threads("cpu") == 1
    assert load.default_threads("cuda") == torch.get_num_threads()  # the host only launches work there


def test_threads_are_applied_and_restored():
    before = torch.get_num_threads()
    try:
        assert load.apply_threads(1) == 1 and torch.get_num_threads() == 1
        assert load.apply_threads(None) == 1  # None leaves the count as it is
    finally:
        torch.set_num_threads(before)


def test_a_run_records_threads_load_and_reference(db, monkeypatch):
    import fusebench
    from fusebench.measure.reference import load_record
    from fusebench.measure.timing import TimingSettings
    from fusebench.store import Store

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the CPU's default: one thread
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        df = fusebench.run(["softmax"], impls=["eager"], shapes="16x32", db=db, isolate=False, metrics="none",
                           timing=TimingSettings(warmup_ms=1, rep_ms=2, host_max_ms=5))
        assert torch.get_num_threads() == 2  # the caller's own count, as it was
    finally:
        torch.set_num_threads(before)
    row = df.iloc[0]
    assert row.threads == 1 and row.under_load in (0, 1) and row.load_per_cpu >= 0
    with Store.open(db, create=False) as store:
        info = store.run_info(int(row.run_id))
    assert json.loads(info["timing"])["threads"] == 1
    assert [s["at"] for s in json.loads(info["load"])["samples"]] == ["start", "end"]
    record = load_record(info["reference"])
    assert [s["at"] for s in record["samples"]] == ["start", "end"] and record["threads"] == 1
    assert all(s[w]["time_us"] > 0 for s in record["samples"] for w in ("copy", "gemm"))
    assert set(json.loads(info["precision"])) == {"matmul_allow_tf32", "cudnn_allow_tf32", "float32_matmul_precision"}
    assert isinstance(df.attrs["warnings"], list)
