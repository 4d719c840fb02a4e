"""A run's reference workload: a copy and a GEMM of fixed sizes, timed as cells are, on the run's
device, at the run's start and at its end (and again at each resumption).

A run slowed as a whole -- a busy host, a throttled CPU, other clocks -- moves every cell alike,
and each cell's own repetitions cannot tell: to them it is not noise.  The reference can: two runs
of the same code on the same machine time the same reference alike unless the machine's speed
differed, and a run whose start and end references disagree saw the machine change speed while
it measured.  `fusebench compare` divides run B's times by the ratio of the two runs' references
(`speed_ratio`) and refuses to judge a run that drifted (report/compare.py).

The record, stored in the run's `reference` column (JSON):
{"device", "threads", "workloads": {name: what it is}, "samples": [{"at": "start"|"end", "time",
name: {time_us, time_q20_us, time_q80_us, time_spread, time_reps, time_samples_us}}, ...]}.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, replace

import torch

from fusebench.measure.timing import TimingSettings, time_call

# Sizes: calls of about a millisecond on a CPU, so that its ~100 ms budget holds many
# repetitions (a host that deschedules the process for whole scheduler ticks moves a few of them,
# not the median); on a GPU the copy's buffers exceed any L2.
SIZES = {"cpu": {"copy_bytes": 8 << 20, "gemm_n": 256, "gemm_dtype": torch.float32},
         "cuda": {"copy_bytes": 256 << 20, "gemm_n": 4096, "gemm_dtype": torch.bfloat16}}
# Timing budget of each workload, at most (the run's own is used where smaller; its flush and thread
# settings are kept): about 110 ms each on the CPU, so about 0.45 s a run for its start and end.
BUDGET = dict(warmup_ms=10.0, rep_ms=40.0, host_max_ms=100.0, max_reps=400)
# Repetitions kept per workload and sample (evenly thinned), for compare's bootstrap.
KEEP_SAMPLES = 200
WORKLOADS = ("copy", "gemm")


def describe(device: str) -> dict:
    s = SIZES["cuda" if device.startswith("cuda") else "cpu"]
    dtype = str(s["gemm_dtype"]).replace("torch.", "")
    n = s["gemm_n"]
    return {"copy": f"dst.copy_(src), {s['copy_bytes'] >> 20} MiB per buffer",
            "gemm": f"torch.mm {n}x{n}x{n} {dtype}"}


def _stats_columns(stats) -> dict:
    samples = list(stats.samples_us)
    if len(samples) > KEEP_SAMPLES:
        idx = [round(i * (len(samples) - 1) / (KEEP_SAMPLES - 1)) for i in range(KEEP_SAMPLES)]
        samples = [samples[i] for i in idx]
    return dict(time_us=stats.median_us, time_q20_us=stats.q20_us, time_q80_us=stats.q80_us,
                time_spread=stats.spread, time_reps=stats.reps,
                time_samples_us=json.dumps([float(f"{t:.5g}") for t in samples]))


def measure(device: str, timing: TimingSettings, at: str) -> dict:
    """Time the reference workload once on `device` (one sample of the record, tagged `at`)."""
    from fusebench.measure.load import apply_threads

    key = "cuda" if device.startswith("cuda") else "cpu"
    s = SIZES[key]
    settings = replace(timing, **{k: min(v, getattr(timing, k)) for k, v in BUDGET.items()})
    before = torch.get_num_threads()
    apply_threads(timing.threads)
    try:
        g = torch.Generator(device=device)
        g.manual_seed(0)
        src = torch.randint(0, 127, (s["copy_bytes"],), dtype=torch.int8, device=device, generator=g)
        dst = torch.empty_like(src)
        n, dt = s["gemm_n"], s["gemm_dtype"]
        a = torch.randn((n, n), device=device, generator=g).to(dt)
        b = torch.randn((n, n), device=device, generator=g).to(dt) / math.sqrt(n)
        c = torch.empty((n, n), device=device, dtype=dt)
        out = {"at": at, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
        with torch.no_grad():
            out["copy"] = _stats_columns(time_call(lambda: dst.copy_(src), device, settings))
            out["gemm"] = _stats_columns(time_call(lambda: torch.mm(a, b, out=c), device, settings))
        del src, dst, a, b, c
        if key == "cuda":  # the run's own process keeps no GPU memory while its workers measure
            from fusebench.measure import timing as timing_module

            timing_module._FLUSH.pop(device, None)
            torch.cuda.empty_cache()
        return out
    finally:
        apply_threads(before)


def new_record(device: str, timing: TimingSettings) -> dict:
    return {"device": "cuda" if device.startswith("cuda") else "cpu", "threads": timing.threads,
            "workloads": describe(device), "samples": []}


def load_record(text) -> dict | None:
    """A stored `reference` column as a dict, or None (no reference, or unreadable)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("samples"), list):
        return None
    samples = [s for s in record["samples"] if isinstance(s, dict) and all(
        isinstance(s.get(w), dict) and (s[w].get("time_us") or 0) > 0 for w in WORKLOADS)]
    return {**record, "samples": samples} if samples else None


def index(sample: dict) -> float:
    """One sample's speed index: the geometric mean of its workloads' median times (µs)."""
    return math.exp(sum(math.log(sample[w]["time_us"]) for w in WORKLOADS) / len(WORKLOADS))


@dataclass(frozen=True)
class Speed:
    """How fast the machine ran a run, from its reference samples (µs of the speed index)."""

    index: float  # geometric mean over the samples
    lo: float  # fastest sample
    hi: float  # slowest sample
    samples: int


def speed(record: dict) -> Speed:
    values = [index(s) for s in record["samples"]]
    geo = math.exp(sum(math.log(v) for v in values) / len(values))
    return Speed(geo, min(values), max(values), len(values))


def workload_ratios(record_a: dict, record_b: dict) -> dict[str, float]:
    """Per workload, the geometric mean of B's medians over A's."""
    out = {}
    for w in WORKLOADS:
        ga = [math.log(s[w]["time_us"]) for s in record_a["samples"]]
        gb = [math.log(s[w]["time_us"]) for s in record_b["samples"]]
        out[w] = math.exp(sum(gb) / len(gb) - sum(ga) / len(ga))
    return out
