"""Running cells: user cases, Inductor fallback detection, and sweeps that survive faults."""
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import fusebench
from fusebench.measure.timing import TimingSettings

FAST = TimingSettings(warmup_ms=1, rep_ms=2, min_reps=2, max_reps=5)


def test_torch_mm_ceiling_is_timed_but_never_checked(db):
    # torch-mm leaves the epilogue out on purpose: it must be timed and flagged, not pass as a match
    df = fusebench.run(["matmul_add", "softmax"], impls=["eager", "torch-mm"], shapes="64x48", db=db, timing=FAST)
    mm = df[(df.impl == "torch-mm") & (df.case_name == "matmul_add")]
    assert len(mm) and (mm.status == "ok").all() and (mm.time_us > 0).all()
    assert mm.max_abs_err.isna().all() and (mm.seeds == 0).all()
    assert all("accuracy" in na for na in mm.na)
    assert (df[(df.impl == "eager")].seeds == 3).all()
    assert not ((df.impl == "torch-mm") & (df.case_name == "softmax")).any()  # not a GEMM: never planned


def test_memcpy_ceiling_moves_the_cases_minimum_bytes(db):
    # the same-size copy: timed beside the implementations, never checked, as many bytes as the case
    df = fusebench.run(["softmax", "horizontal_reduction_reduction"], impls=["eager", "memcpy"], shapes="64x48",
                       db=db, timing=FAST, device="cpu")
    cp = df[df.impl == "memcpy"].set_index("case_name")
    assert (cp.status == "ok").all() and (cp.time_us > 0).all() and (cp.seeds == 0).all()
    assert all("accuracy" in na for na in cp.na)
    assert cp.loc["softmax", "min_bytes"] == 2 * 64 * 48 * 4  # read x, write y
    assert f"copy of {64 * 48 * 4:,} bytes per buffer" in cp.loc["softmax", "note"]
    assert cp.loc["horizontal_reduction_reduction", "min_bytes"] == 64 * 48 * 4 + 2 * 64 * 4
    assert cp.loc["softmax", "gbps"] == pytest.approx(cp.loc["softmax", "min_bytes"] / cp.loc["softmax", "time_us"] / 1e3)


def test_memcpy_ceiling_needs_a_byte_model():
    from fusebench.impls import get_impl

    case = fusebench.get_case("softmax")
    impl = get_impl("memcpy")
    assert impl.supports(case, (64, 48), torch.float32, "cpu") is None
    assert "no bytes" in impl.supports(case, (0, 48), torch.float32, "cpu")
    prepared = impl.prepare(case, (64, 48), torch.float32, "cpu")
    x = torch.randn(64, 48)
    out = prepared.fn(x)
    assert out.numel() == 64 * 48 * 4 and out.dtype == torch.uint8 and bool((out == 1).all())


@pytest.mark.parametrize("name", ["matmul_add", "matmul_relu", "matmul_add_relu"])
def test_cublaslt_computes_each_epilogue_case(name):
    # the same addmm calls on the CPU (cuBLASLt itself needs a GPU): each is the case, not a part of it
    from fusebench.cases import get_case
    from fusebench.impls.cublaslt import epilogue_fn

    case = get_case(name)
    args = case.make_inputs((40, 24, 56), torch.float32, "cpu", 0)
    got = epilogue_fn(name, 24, torch.float32, "cpu")(*args)
    torch.testing.assert_close(got, case.fn(*args), rtol=1e-5, atol=1e-5)


def test_cublaslt_is_gpu_only_and_epilogue_cases_only(db):
    df = fusebench.run(["matmul_add", "softmax"], impls=["cublaslt"], shapes="64x48", db=db, timing=FAST,
                       device="cpu")
    reasons = dict(zip(df.case_name, df.reason))
    assert (df.status == "unsupported").all() and set(reasons) == {"matmul_add"}  # softmax: not planned
    assert "CUDA" in reasons["matmul_add"]


def test_user_case_gets_every_implementation(db):
    @fusebench.case(inputs=lambda s, dt, dev, seed: (fusebench.randn(s, dt, dev, seed),), shapes=[(16, 24)],
                    bytes_model=lambda s, dt: 2 * s[0] * s[1] * 4)
    def scaled_tanh(x):
        return torch.tanh(x) * 3

    df = fusebench.run(["scaled_tanh"], db=db, timing=FAST)
    by_impl = dict(zip(df.impl, df.status))
    assert by_impl["eager"] == "ok" and by_impl["inductor"] == "ok"
    assert by_impl["memcpy"] == "ok"  # it has a byte model: the same-size copy ceiling applies
    # no Triton kernel and no attention: those cells do not apply and are not planned
    assert set(by_impl) == {"eager", "inductor", "memcpy"}
    ok = df[(df.status == "ok") & (df.impl != "memcpy")]
    assert (ok.time_us > 0).all() and (ok.wall_time_us > 0).all() and (ok.seeds == 3).all()
    assert (ok.gbps > 0).all() and (ok.max_rel_err < 1e-5).all()
    assert ok[ok.impl == "inductor"].graphs.iloc[0] >= 1


def test_inductor_detects_eager_fallback_and_recompiles():
    from fusebench.impls import FellBack, get_impl

    case = fusebench.get_case("softmax")
    prepared = get_impl("inductor").prepare(case, (8, 8), torch.float32, "cpu")
    with pytest.raises(FellBack, match="ran eagerly"):
        prepared.check()  # nothing compiled yet: a call now would have run eagerly
    prepared.fn(torch.randn(8, 8))
    assert prepared.check()["graphs"] == 1
    prepared.fn(torch.randn(8, 16))  # a new shape: Dynamo recompiles
    with pytest.raises(FellBack, match="recompile"):
        prepared.check()


def pd_isnull(v):
    return v is None or v != v


def test_mismatch_keeps_errors_and_is_timed_anyway(db):
    @fusebench.case(inputs=lambda s, dt, dev, seed: (fusebench.randn(s, dt, dev, seed),), shapes=[(8, 8)],
                    reference=lambda x: torch.where(x > 2.0, x, x * 2))
    def mostly_right(x):
        return x * 2

    row = fusebench.run(["mostly_right"], impls=["eager"], db=db, timing=FAST).iloc[0]
    # Both verdicts: the wrong answer is the status, and the time is there to read beside it.
    assert row.status == "mismatch" and row.max_abs_err > 0 and row.tol_ratio > 1
    assert row.time_us > 0 and row.time_reps >= 1 and row.wall_time_us > 0 and "tolerance" in row.reason


def test_nan_never_passes(db):
    @fusebench.case(inputs=lambda s, dt, dev, seed: (fusebench.randn(s, dt, dev, seed),), shapes=[(8, 8)],
                    reference=lambda x: x)
    def poisons_one(x):
        y = x.clone()
        y[3, 3] = float("nan")
        return y

    row = fusebench.run(["poisons_one"], impls=["eager"], db=db, timing=FAST).iloc[0]
    assert row.status == "mismatch" and "non-finite" in row.reason


FAULTS = textwrap.dedent('''
    import os, time, torch, fusebench

    def x(s, dt, dev, seed):
        return (fusebench.randn(s, dt, dev, seed),)

    @fusebench.case(inputs=x, shapes=[(8, 8)])
    def raises(a):
        raise ValueError("boom")

    @fusebench.case(inputs=x, shapes=[(8, 8)])
    def aborts(a):
        os.abort()

    @fusebench.case(inputs=x, shapes=[(8, 8)])
    def hangs(a):
        time.sleep(3600)

    @fusebench.case(inputs=x, shapes=[(8, 8)])
    def exhausts_memory(a):
        # asks the allocator for 8 PiB: on the CPU this fails at once, as a GPU OOM would
        return torch.empty(2**50, dtype=torch.float64)

    @fusebench.case(inputs=x, shapes=[(8, 8), (16, 8)])
    def fine(a):
        return a * 2
''')


def run_cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "fusebench.cli", *args], capture_output=True, text=True, **kw)


def cells(db):
    con = sqlite3.connect(db)
    rows = con.execute("SELECT case_name, impl, shape, status, reason FROM cells ORDER BY id").fetchall()
    con.close()
    return rows


@pytest.mark.slow
def test_faults_are_contained_and_the_sweep_goes_on(tmp_path, db):
    plugin = tmp_path / "faults.py"
    plugin.write_text(FAULTS)
    r = run_cli("run", "raises", "aborts", "hangs", "exhausts_memory", "fine", "--plugin", str(plugin),
                "--impl", "eager", "--db", db, "--cell-timeout", "20", "--metrics", "none", timeout=240)
    assert r.returncode == 0, r.stderr
    status = {(c, s): (st, why) for c, i, s, st, why in cells(db)}
    assert status[("raises", "8x8")][0] == "error" and "boom" in status[("raises", "8x8")][1]
    assert status[("aborts", "8x8")][0] == "crashed" and "signal" in status[("aborts", "8x8")][1]
    assert status[("hangs", "8x8")][0] == "timeout"
    assert status[("exhausts_memory", "8x8")][0] == "oom"
    assert status[("fine", "8x8")][0] == "ok" and status[("fine", "16x8")][0] == "ok"
    assert len(status) == 6
    r = run_cli("run", "raises", "fine", "--plugin", str(plugin), "--impl", "eager", "--db", db, "--strict",
                "--metrics", "none", timeout=120)
    assert r.returncode == 1


SLOW = textwrap.dedent('''
    import time, fusebench

    def slow_inputs(s, dt, dev, seed):
        time.sleep(0.15)
        return (fusebench.randn(s, dt, dev, seed),)

    @fusebench.case(inputs=slow_inputs, shapes=[(8, n) for n in range(1, 13)])
    def slow(a):
        return a + 1

    @fusebench.case(inputs=slow_inputs, shapes=[(4, n) for n in range(1, 7)])
    def slow_too(a):
        return a * 3
''')


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_run_resumes_without_duplicates_or_gaps(tmp_path, db, sig):
    plugin = tmp_path / "slow.py"
    plugin.write_text(SLOW)
    args = [sys.executable, "-m", "fusebench.cli", "run", "slow", "--plugin", str(plugin), "--impl", "eager",
            "--db", db, "--metrics", "none"]
    # two commits: the resumed cells must say which code measured them
    env = lambda commit: {**os.environ, "FUSEBENCH_COMMIT": commit}  # noqa: E731
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env("aaa1111"))
    deadline = time.time() + 120
    while time.time() < deadline:
        if os.path.exists(db) and len(cells_or_empty(db)) >= 4:
            break
        time.sleep(0.2)
    proc.send_signal(sig)
    proc.wait(60)
    assert not os.path.exists(db + "-wal")  # every finished cell is in the file itself: a copy holds them all
    done = cells(db)
    assert 4 <= len(done) < 12
    status = sqlite3.connect(db).execute("SELECT status FROM runs WHERE id=1").fetchone()[0]
    assert status == ("interrupted" if sig == signal.SIGTERM else "running")
    r = run_cli("run", "--resume", "1", "--db", db, "--plugin", str(plugin), timeout=240, env=env("bbb2222"))
    assert r.returncode == 0, r.stderr
    rows = cells(db)
    shapes = sorted(s for _, _, s, _, _ in rows)
    assert shapes == sorted(f"8x{n}" for n in range(1, 13))  # each cell exactly once
    assert all(st == "ok" for *_, st, _ in rows)
    con = sqlite3.connect(db)
    commits = [c for (c,) in con.execute("SELECT git_commit FROM cells ORDER BY id")]
    assert commits == ["aaa1111"] * len(done) + ["bbb2222"] * (12 - len(done))
    assert con.execute("SELECT git_commit FROM runs WHERE id=1").fetchone()[0] == "aaa1111"
    con.close()


def cells_or_empty(db):
    try:
        return cells(db)
    except sqlite3.OperationalError:
        return []


@pytest.mark.slow
def test_two_workers_produce_the_same_cells(tmp_path):
    """The multi-GPU path (one worker per GPU, a shared queue) measures the same set of cells.
    On the CPU the two workers both run on the CPU: the scheduling is what is tested."""
    plugin = tmp_path / "slow.py"
    plugin.write_text(SLOW)
    sets = []
    for gpus in (None, "0,1"):
        db = str(tmp_path / f"run_{gpus}.db")
        args = ["run", "slow", "slow_too", "--plugin", str(plugin), "--impl", "eager", "--db", db, "--metrics",
                "none", "--device", "cpu"] + (["--gpus", gpus] if gpus else [])
        r = run_cli(*args, timeout=600)
        assert r.returncode == 0, r.stderr
        sets.append(sorted((c, i, s, st) for c, i, s, st, _ in cells(db)))
    assert sets[0] == sets[1] and len(sets[0]) == 18 and all(st == "ok" for *_, st in sets[0])


def test_worker_gpu_is_an_index_among_the_visible_gpus():
    from fusebench.runner.scheduler import visible_device

    assert visible_device(1, None) == "1" and visible_device(0, "") == "0"
    # under CUDA_VISIBLE_DEVICES=2,3 (e.g. a job scheduler's allocation) --gpus 0,1 means GPUs 2 and 3
    assert [visible_device(g, "2,3") for g in (0, 1)] == ["2", "3"]
    assert visible_device(0, "GPU-8f1c, GPU-77aa") == "GPU-8f1c"
    with pytest.raises(ValueError, match="only 1 GPU"):
        visible_device(1, "3")


def test_cells_that_cannot_fit_are_skipped_not_attempted():
    from fusebench.runner.cell import measure_cell
    from fusebench.runner.plan import Cell

    row = measure_cell(Cell("softmax", "eager", (2**20, 2**20), "fp32", "cpu"), FAST)
    assert row["status"] == "skipped" and "needs about" in row["reason"] and row["seconds"] < 5


def test_timing_settings_record_the_flush():
    # Runs store their timing settings; the flush mode tells clean flushes from evict_last ones
    # (dirty lines left for the timed call to write back) and from plain zeroing, which leaves
    # evict_last lines in L2.
    assert TimingSettings().as_dict()["flush_mode"] == "clean"
    assert TimingSettings(flush_mode="zero").as_dict()["flush_mode"] == "zero"


def test_timing_settings_record_the_warm_call():
    # Runs run the call on a second input set after each flush; runs stored without the setting
    # resume without it (api._resume_plan), and --no-warm-call stores 0.
    assert TimingSettings().as_dict()["warm_call_max_bytes"] == 1 << 30
    # The warm call's outputs are dropped from L2 after it (measure.timing)
    assert TimingSettings().as_dict()["warm_call_discards"] is True


def test_warm_call_discards_its_outputs_but_not_its_inputs(monkeypatch):
    # The warm call's outputs go to l2flush.discard_outputs, with the second input set kept (an
    # output that is one of them is not dropped); discard=False (runs stored without it) skips it.
    from fusebench.measure import l2flush
    from fusebench.measure.timing import warm_call

    dropped = []
    monkeypatch.setattr(l2flush, "discard_outputs", lambda out, keep=(): dropped.append((out, tuple(keep))))
    monkeypatch.setattr(l2flush, "touch_pages", lambda tensors: None)
    other_in, out = torch.ones(3), torch.zeros(3)
    warm_call(lambda: out, [torch.ones(3)], [other_in])()
    assert dropped == [(out, (other_in,))]
    warm_call(lambda: out, [torch.ones(3)], [other_in], discard=False)()
    assert len(dropped) == 1


class _FakeCase:
    def __init__(self):
        self.seeds = []

    def make_inputs(self, shape, dtype, device, seed):
        self.seeds.append(seed)
        return (torch.full(shape, float(seed)),)


def test_warm_call_runs_the_call_on_a_second_input_set():
    from fusebench.measure.timing import WARM_CALL_SEED, warm_call_for
    from fusebench.runner.cell import SEEDS

    case, seen = _FakeCase(), []
    call = lambda x: seen.append(float(x[0, 0]))  # noqa: E731
    inputs = lambda seed: case.make_inputs((4, 8), torch.float32, "cuda", seed)  # noqa: E731
    args = inputs(0)
    warm = warm_call_for(call, inputs, args, "cuda:0", TimingSettings(), 256)
    warm()
    assert seen == [WARM_CALL_SEED] and WARM_CALL_SEED not in SEEDS
    # none on the CPU, without a flush, when turned off, or above the traffic limit
    for device, settings, traffic in (("cpu", TimingSettings(), 256), ("cuda:0", TimingSettings(flush_l2=False), 256),
                                      ("cuda:0", TimingSettings(warm_call_max_bytes=0), 256),
                                      ("cuda:0", TimingSettings(), (1 << 30) + 1)):
        assert warm_call_for(call, inputs, args, device, settings, traffic) is None
    # without a minimum-bytes model, the inputs' size decides
    small = TimingSettings(warm_call_max_bytes=4 * 8 * 4)
    assert warm_call_for(call, inputs, args, "cuda:0", small, None) is not None
    assert warm_call_for(call, inputs, args, "cuda:0", TimingSettings(warm_call_max_bytes=4 * 8 * 4 - 1), None) is None


def test_resuming_a_run_stored_before_the_warm_call_keeps_its_timing(db):
    # A run whose stored timing has no warm_call_max_bytes resumes with none (0), as it was timed.
    import json

    from fusebench.api import _resume_plan
    from fusebench.store import Store

    fusebench.run(["softmax"], impls=["eager"], shapes="16x32", db=db, timing=FAST, device="cpu")
    store = Store.open(db)
    old = {k: v for k, v in FAST.as_dict().items() if k not in ("warm_call_max_bytes", "warm_call_discards")}
    with store.con:
        store.con.execute("UPDATE runs SET timing=? WHERE id=1", (json.dumps(old),))
    _, timing, _ = _resume_plan(store, 1, None, [])
    assert timing.warm_call_max_bytes == 0 and not timing.warm_call_discards
    # one stored with a warm call but no warm_call_discards kept its outputs in L2, and resumes so
    old["warm_call_max_bytes"] = 1 << 30
    with store.con:
        store.con.execute("UPDATE runs SET timing=? WHERE id=1", (json.dumps(old),))
    _, timing, _ = _resume_plan(store, 1, None, [])
    assert timing.warm_call_max_bytes == 1 << 30 and not timing.warm_call_discards
