"""Timing one call, measured three honest ways.

- `time`: the median GPU time of one call from CUDA events, with the L2 cache flushed before each
  call, after warm-up; every repetition is kept (`time_samples_us`), and the spread as quantiles
  and as IQR / median (`time_spread`).  A short spin kernel before the start event lets the host
  enqueue the whole call first, so host launch cost never shows up as GPU time (it is wall_time's
  business).
- `wall_time`: host time per call, calls back to back, synchronised once at the end -- what a
  Python caller pays, Dynamo guards and wrappers included.
- On the CPU both are host timings (each call is synchronous there), and the number of
  repetitions follows a stability rule, the one torch.utils.benchmark's adaptive_autorange uses:
  blocks of calls until the IQR of the samples is within `stable_spread` of their median, or
  `host_max_ms` is spent.

The flush (mode "clean", see _flush_l2) writes a buffer twice the L2's size with `evict_last`
stores, then reads another buffer of that size with `evict_last` loads.  Zeroing it with ordinary
stores, as triton.testing.do_bench does ("zero"), leaves lines that an earlier call loaded
`evict_last` in L2 -- Inductor loads most inputs so -- and the next call finds them there.  The
stores alone ("evict_last") leave L2 full of dirty lines that the timed call then writes back; the
read sweep writes them back before the start event (docs/methodology.md, 'The L2 flush').

After each flush, before the spin, a "warm call" (when the caller passes one; the runner does for
calls of up to 1 GiB of traffic): the same call on a second, same-shaped set of inputs (its freed
outputs are where the timed call's will be allocated), its outputs' lines then dropped from L2
without write-back (l2flush.discard_outputs; otherwise the timed call writes them back), then one
byte read every 64 KiB of the timed call's inputs (l2flush.touch_pages).  The timed call's data is
still cold, but what else the flush disturbed is settled: without it a small call's median moves
between levels from one timing to the next of the same kernel (docs/methodology.md, 'The warm
call').

Only the call is inside the timed region: no allocation, synchronisation or cache emptying.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

# IQR / median above which a cell's time is flagged as too noisy to trust.
NOISY_SPREAD = 0.10


@dataclass
class TimingSettings:
    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    min_reps: int = 10
    max_reps: int = 1000
    flush_l2: bool = True
    # How: "clean" (evict_last stores, then an evict_last read sweep that leaves L2 clean: the
    # default), "evict_last" (the stores alone), "zero" (ordinary stores, as do_bench) or
    # "discard" (the stores' lines dropped: an empty L2); runs store which.
    flush_mode: str = "clean"
    # Spin the GPU before each start event so host launch cost stays out of `time` (see
    # _host_cover_cycles); False reproduces plain event timing as triton.testing.do_bench does it.
    host_cover: bool = True
    # The warm call after each flush (module docstring), for calls whose traffic (the case's
    # minimum bytes) is at most this; 0 turns it off.  Above it what the warm call settles is a
    # negligible share of a call (docs/methodology.md, 'The warm call').
    warm_call_max_bytes: int = 1 << 30
    # Drop the warm call's outputs from L2 after it (l2flush.discard_outputs); without it the
    # timed call writes those dirty lines back (docs/methodology.md, 'The warm call').
    warm_call_discards: bool = True
    # CPU only: time blocks of calls until IQR / median of the samples is at most this (the rule
    # of torch.utils.benchmark's adaptive_autorange), or until host_max_ms is spent.
    stable_spread: float = 0.10
    host_max_ms: float = 250.0
    # torch's intra-op threads every cell of the run uses, in whichever process measures it
    # (measure.load); None: the process's own count.  A run fixes it when it starts.
    threads: int | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def for_shapes(cls, shapes: str, **kwargs) -> "TimingSettings":
        """The settings of a run over `shapes` (a --shapes text): the quick shapes get QUICK_BUDGET,
        so that the default run answers in minutes; any other request the full budget."""
        return cls(**{**(QUICK_BUDGET if shapes.strip() == "quick" else {}), **kwargs})


# A run over the cases' quick shapes (the default run) spends 10 ms warming up each cell and 50 ms
# timing it instead of 25 and 100: a cell of the quick shapes takes <= ~1 ms, so 50 ms is still
# >= 50 repetitions (up to max_reps), and every cell's spread is shown and flagged as in any run.
QUICK_BUDGET = {"warmup_ms": 10.0, "rep_ms": 50.0}


@dataclass
class TimeStats:
    median_us: float
    q20_us: float
    q80_us: float
    min_us: float
    max_us: float
    reps: int
    samples_us: list[float] = field(default_factory=list, repr=False)  # every repetition, in order
    spread: float = 0.0  # IQR / median

    def columns(self) -> dict:
        """The store's time columns of a cell."""
        return dict(time_us=self.median_us, time_q20_us=self.q20_us, time_q80_us=self.q80_us,
                    time_min_us=self.min_us, time_max_us=self.max_us, time_reps=self.reps,
                    time_samples_us=[float(f"{t:.5g}") for t in self.samples_us], time_spread=self.spread)


def spread(samples_us: Sequence[float]) -> float:
    """IQR / median of the samples: 0.1 means the middle half spans 10% of the median."""
    if len(samples_us) < 2:
        return 0.0
    q25, q50, q75 = np.percentile(np.asarray(samples_us, dtype=float), [25, 50, 75])
    return float((q75 - q25) / q50) if q50 > 0 else 0.0


def _stats(samples_us: list[float]) -> TimeStats:
    s = sorted(samples_us)
    q = statistics.quantiles(s, n=5, method="inclusive") if len(s) > 1 else [s[0]] * 4
    return TimeStats(statistics.median(s), q[0], q[3], s[0], s[-1], len(s), list(samples_us), spread(s))


def _reps(per_call_ms: float, st: TimingSettings) -> int:
    return int(min(st.max_reps, max(st.min_reps, st.rep_ms / max(per_call_ms, 1e-6))))


FLUSH_MODES = ("clean", "evict_last", "zero", "discard")
HEAD_START_CYCLES = 400_000  # ~200 us at ~2 GHz
_FLUSH: dict[str, torch.Tensor] = {}


def _flush_buffer(device: str) -> torch.Tensor:
    """Two buffers of twice the L2 size each, as one tensor: the first half is written to evict
    whatever the previous call left in L2, the second read to write the first back ("clean")."""
    if device not in _FLUSH:
        props = torch.cuda.get_device_properties(device)
        l2 = getattr(props, "L2_cache_size", 0) or (64 << 20)
        _FLUSH[device] = torch.zeros(2 * (2 * l2 // 4), dtype=torch.int32, device=device)
    return _FLUSH[device]


def _flush_l2(buf: torch.Tensor, mode: str) -> None:
    """Flush L2 with `buf` (_flush_buffer) so that nothing the timed call may read is left there.

    L2 evicts lower-priority lines first: lines loaded `evict_last` outlive a buffer written with
    ordinary stores however large; mode "evict_last" writes with such stores itself (l2flush.py).
    Mode "clean" then reads the other half with evict_last loads: their clean lines replace the
    dirty ones, whose write-back to DRAM would otherwise fall inside the timed call.  Mode
    "discard" drops the written lines from L2 instead (l2flush.discard_l2): no write-back, and an
    empty L2 rather than one full of evict_last lines."""
    if mode not in FLUSH_MODES:
        raise ValueError(f"unknown L2 flush mode {mode!r}: {', '.join(FLUSH_MODES)}")
    written, swept = buf.chunk(2)
    if mode == "zero":
        written.zero_()
        return
    from fusebench.measure.l2flush import discard_l2, read_evict_last, zero_evict_last

    zero_evict_last(written)
    if mode == "clean":
        read_evict_last(swept)
    elif mode == "discard":
        discard_l2(written)


def time_call(fn: Callable[[], object], device: str, st: TimingSettings,
              warm: Callable[[], object] | None = None) -> TimeStats:
    """Time fn (see the module docstring).  `warm`: the warm call, run after each flush, outside the
    timed region; the caller decides when to pass one (warm_call_max_bytes)."""
    if device.startswith("cuda"):
        return _time_cuda(fn, device, st, warm)
    return _time_host(fn, st)


def warm_call(other: Callable[[], object], timed: Sequence, other_inputs: Sequence = (),
              discard: bool = True) -> Callable[[], None]:
    """The warm call for time_call (module docstring): `other` -- the same call on a second input
    set, `other_inputs` --, its outputs dropped from L2 (unless `discard` is False, or they are
    among `other_inputs`), then the pages of the timed call's tensors `timed` touched."""
    # Triton: imported only where a GPU call is timed
    from fusebench.measure.l2flush import discard_outputs, touch_pages

    def warm() -> None:
        out = other()
        if discard:
            discard_outputs(out, keep=other_inputs)
        touch_pages(timed)

    return warm


# The seed of the warm call's second input set: apart from the seeds a cell checks and times.
WARM_CALL_SEED = 1000


def warm_call_for(call: Callable, inputs: Callable[[int], Sequence], timed: Sequence, device: str,
                  st: TimingSettings, traffic: int | None) -> Callable[[], None] | None:
    """The warm call for timing `call` on the inputs `timed`, or None: on the CPU, without a flush,
    or above st.warm_call_max_bytes of traffic (the call's minimum bytes, else the size of `timed`).
    `inputs(WARM_CALL_SEED)` makes the second input set (and readies the call for it)."""
    if not device.startswith("cuda") or not st.flush_l2 or st.warm_call_max_bytes <= 0:
        return None
    if traffic is None:
        traffic = sum(a.numel() * a.element_size() for a in timed if isinstance(a, torch.Tensor))
    if traffic > st.warm_call_max_bytes:
        return None
    other = inputs(WARM_CALL_SEED)
    # Its outputs, freed, are where the timed call's will be allocated.
    return warm_call(lambda: call(*other), timed, other, discard=st.warm_call_discards)


def _host_cover_cycles(fn, device) -> int:
    """GPU cycles to spin before each timed call so the host has enqueued the whole call before the
    start event fires: twice the host's enqueue time of one call, at least 50 us (at ~2 GHz).

    Without it, a call whose Python wrapper takes longer to launch than the L2 flush takes to run
    would be charged the host's launch time as GPU time; that cost is what wall_time reports."""
    t = time.perf_counter()
    fn()
    host_us = (time.perf_counter() - t) * 1e6
    torch.cuda.synchronize(device)
    return int(max(50.0, 2 * host_us) * 2000)


def _time_cuda(fn, device, st: TimingSettings, warm=None) -> TimeStats:
    flush = _flush_buffer(device) if st.flush_l2 else None
    warm = warm if flush is not None else None  # without a flush nothing needs settling

    def before():  # outside the events: not timed
        if flush is not None:
            _flush_l2(flush, st.flush_mode)
        if warm is not None:
            warm()

    # Warm up and estimate the per-call time (flush included, as in the timed loop).
    fn()
    if warm is not None:
        warm()
    torch.cuda.synchronize(device)
    cover = _host_cover_cycles(fn, device) if st.host_cover and hasattr(torch.cuda, "_sleep") else 0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n_est = 0
    start.record()
    while True:
        before()
        fn()
        n_est += 1
        end.record()
        end.synchronize()
        if start.elapsed_time(end) >= st.warmup_ms or n_est >= st.max_reps:
            break
    reps = _reps(start.elapsed_time(end) / n_est, st)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    caught_up = torch.cuda.Event()
    for i in range(reps):
        before()
        _spin(cover, caught_up)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize(device)
    return _stats([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)])


def time_interleaved(fns: Sequence[Callable[[], object]], device: str, st: TimingSettings, rounds: int,
                     warms: Sequence[Callable[[], object] | None] | None = None) -> list[list[float]]:
    """Time several calls rep by rep in turn: each round times every call once, in an order that
    reverses from round to round (A B, B A, ...), each rep as time_call times one (flush, the call's
    warm call, the spin, the events).  Whatever drifts during the run -- clocks, the levels a small
    call's time settles on after a flush -- then falls on all of them alike, so that their ratio
    is sharper than from two separate timings (`fusebench paired`).  Returns each call's samples (us).
    On the CPU: host timings, interleaved the same way."""
    warms = list(warms) if warms is not None else [None] * len(fns)
    order = list(range(len(fns)))
    samples: list[list[float]] = [[] for _ in fns]
    if not device.startswith("cuda"):
        for f in fns:
            f()
        for r in range(rounds):
            for i in (order if r % 2 == 0 else order[::-1]):
                t = time.perf_counter()
                fns[i]()
                samples[i].append((time.perf_counter() - t) * 1e6)
        return samples
    flush = _flush_buffer(device) if st.flush_l2 else None
    covers = []
    for f, w in zip(fns, warms):
        f()
        if w is not None:
            w()
        torch.cuda.synchronize(device)
        covers.append(_host_cover_cycles(f, device) if st.host_cover and hasattr(torch.cuda, "_sleep") else 0)
    caught_up = torch.cuda.Event()
    for r in range(rounds):
        events = []
        for i in (order if r % 2 == 0 else order[::-1]):
            if flush is not None:
                _flush_l2(flush, st.flush_mode)
                if warms[i] is not None:
                    warms[i]()
            _spin(covers[i], caught_up)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[i]()
            end.record()
            events.append((i, start, end))
        torch.cuda.synchronize(device)
        for i, start, end in events:
            samples[i].append(start.elapsed_time(end) * 1e3)
    return samples


def _spin(cover: int, caught_up) -> None:
    """The spin before a start event: the GPU waits here, not inside the timed region.  If it has
    already done all that was enqueued (a host slower than the flush and the warm call, e.g. beside
    other workers compiling), the spin starts now and the host has only `cover` to enqueue the call:
    give it a head start too (without it, a few cells in ~2,500 timed at 1.2-4x their time)."""
    if cover:
        caught_up.record()
        torch.cuda._sleep(cover + (HEAD_START_CYCLES if caught_up.query() else 0))


def _time_host(fn, st: TimingSettings) -> TimeStats:
    """Host timing with adaptive_autorange's stopping rule: after warm-up, blocks of calls (one
    block ~rep_ms) until IQR / median <= stable_spread, host_max_ms is spent, or max_reps taken.
    Every call is its own sample, so the stored spread is the calls' own."""
    t0 = time.perf_counter()
    warm: list[float] = []
    while True:
        t = time.perf_counter()
        fn()
        warm.append(time.perf_counter() - t)
        if (time.perf_counter() - t0) * 1e3 >= st.warmup_ms or len(warm) >= st.max_reps:
            break
    # The median warm-up call sizes a block: a few calls stretched by a busy host must not
    # shrink it to a handful of calls.
    block = _reps(statistics.median(warm) * 1e3, st)
    samples: list[float] = []
    start = time.perf_counter()
    while True:
        for _ in range(min(block, st.max_reps - len(samples))):
            t = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t) * 1e6)
        if (spread(samples) <= st.stable_spread or len(samples) >= st.max_reps
                or (time.perf_counter() - start) * 1e3 >= st.host_max_ms):
            break
    return _stats(samples)


def wall_reps(stats: TimeStats, st: TimingSettings) -> int:
    """Back-to-back calls for wall_time: as many as `time` timed, but at most rep_ms of them (at
    least min_reps).  On a GPU that is time's count (its repetitions, a flush each, last longer
    than the calls); on the CPU the stability rule may have run up to host_max_ms of calls, and
    wall time, a mean of the same host calls, takes rep_ms of them."""
    return max(1, min(stats.reps, _reps(stats.median_us / 1e3, st)))


# wall_time: up to this many blocks of back-to-back calls, each at least WALL_BLOCK_CALLS long
WALL_BLOCKS = 5
WALL_BLOCK_CALLS = 20


def wall_time(fn: Callable[[], object], device: str, reps: int) -> float:
    """Host time per call over `reps` back-to-back calls (us): the median, over up to WALL_BLOCKS
    blocks of at least WALL_BLOCK_CALLS calls, of each block's mean per call, each block
    synchronised at its end.  A pause of the host (a garbage collection, another process) then
    moves one block, not the figure; fewer calls than two blocks are one block."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else (lambda: None)
    blocks = max(1, min(WALL_BLOCKS, reps // WALL_BLOCK_CALLS))
    per_block = -(-reps // blocks)
    fn()
    sync()
    means = []
    for _ in range(blocks):
        t = time.perf_counter()
        for _ in range(per_block):
            fn()
        sync()
        means.append((time.perf_counter() - t) / per_block * 1e6)
    return statistics.median(means)
