"""The L2 flush and warm call around each timed call (measure.timing, measure.l2flush)."""
import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
gpu = pytest.mark.gpu

def test_l2_flush_kernel_zeroes_the_whole_buffer():
    # measure.timing's flush: evict_last stores over a buffer that is not a multiple of the block
    from fusebench.measure.l2flush import zero_evict_last

    buf = torch.arange(1, 20_002, dtype=torch.int32, device=DEVICE)
    zero_evict_last(buf)
    assert int(buf.abs().sum()) == 0


def test_l2_flush_modes():
    # "clean" zeroes the first half and only reads the second (the read sweep writes nothing back)
    from fusebench.measure.timing import _flush_l2

    buf = torch.arange(1, 40_003, dtype=torch.int32, device=DEVICE)[:40_002]
    written, swept = buf.chunk(2)
    before = swept.clone()
    _flush_l2(buf, "clean")
    assert int(written.abs().sum()) == 0 and torch.equal(swept, before)
    with pytest.raises(ValueError, match="unknown L2 flush mode 'wipe'"):
        _flush_l2(buf, "wipe")


@gpu
def test_gpu_discard_flush_keeps_other_buffers():
    # "discard" drops only the flush buffer's own lines: a buffer written (dirty in L2) just before
    # the flush keeps its data
    from fusebench.measure.timing import _flush_buffer, _flush_l2

    y = torch.arange(1 << 22, dtype=torch.int32, device="cuda")
    for i in range(3):
        y.add_(1)
        _flush_l2(_flush_buffer("cuda:0"), "discard")
    torch.cuda.synchronize()
    assert torch.equal(y, torch.arange(1 << 22, dtype=torch.int32, device="cuda") + 3)


@gpu
def test_gpu_discard_outputs_keeps_the_inputs_named():
    # The warm call's outputs are dropped from L2 (contents undefined), but not a tensor of `keep`,
    # whose lines, written just before and dirty in L2, must reach memory.
    from fusebench.measure.l2flush import discard_outputs

    kept = torch.arange(1 << 20, dtype=torch.int32, device="cuda")
    for i in range(3):
        kept.add_(1)
        scratch = kept + 5
        discard_outputs((kept, [scratch]), keep=[kept])
    torch.cuda.synchronize()
    assert torch.equal(kept, torch.arange(1 << 20, dtype=torch.int32, device="cuda") + 3)


@gpu
def test_gpu_warm_call_runs_after_each_flush_and_only_with_one():
    from fusebench.measure.timing import TimingSettings, time_call

    x = torch.randn(1 << 16, device="cuda")
    calls = []
    settings = TimingSettings(warmup_ms=1, rep_ms=2, min_reps=5, max_reps=20)
    stats = time_call(lambda: x.add(1), "cuda", settings, warm=lambda: calls.append(x.add(2)))
    assert len(calls) >= stats.reps + 1
    calls.clear()
    time_call(lambda: x.add(1), "cuda", TimingSettings(warmup_ms=1, rep_ms=2, min_reps=5, max_reps=20, flush_l2=False),
              warm=lambda: calls.append(1))
    assert calls == []


@gpu
def test_gpu_touch_pages_reads_without_writing():
    # the warm call's page touch: any dtype and view, the tensors left as they were
    from fusebench.measure.l2flush import touch_pages

    a = torch.randn(3000, 700, device="cuda")
    b = torch.randint(0, 255, (1 << 20,), dtype=torch.uint8, device="cuda")
    before = (a.clone(), b.clone())
    touch_pages([a[5:, 3:], b, None, torch.empty(0, device="cuda"), 3])
    torch.cuda.synchronize()
    assert torch.equal(a, before[0]) and torch.equal(b, before[1])


@gpu
def test_gpu_timing_gives_a_slow_host_a_head_start(monkeypatch):
    # a host slower than the GPU (here: 300 us of sleep in the warm call's host part) must not be
    # charged to the call: the GPU is found idle before reps and spun ahead first
    import time as _time

    from fusebench.measure import timing as tm

    x = torch.randn(1 << 12, device="cuda")
    settings = tm.TimingSettings(warmup_ms=1, rep_ms=2, min_reps=20, max_reps=20)
    spins = []
    real_sleep = torch.cuda._sleep
    monkeypatch.setattr(torch.cuda, "_sleep", lambda c: (spins.append(c), real_sleep(c)))
    slow = tm.time_call(lambda: x.add(1), "cuda", settings, warm=lambda: _time.sleep(300e-6))
    assert sum(c >= tm.HEAD_START_CYCLES for c in spins) >= 10  # found idle at most spins (x.add's cover is less)
    fast = tm.time_call(lambda: x.add(1), "cuda", settings)
    assert slow.median_us < fast.median_us + 5  # a starved call would take the host's 300 us
