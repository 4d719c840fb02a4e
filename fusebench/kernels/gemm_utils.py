"""Helpers shared by the compute-bound kernels (matmul, conv, attention).

Nothing here launches work on its own: device queries, the interpreter switch, the
grouped ("super-grouping") program order used by the GEMM-like kernels, and the `supports`
checks that every wrapper in matmul.py / conv.py / attention.py shares.
"""
from __future__ import annotations

import functools
import inspect
import os

import torch
import triton
import triton.language as tl

from fusebench.kernels.utils import gpu_time_ms, gpu_time_stats


def interpreting() -> bool:
    """True under Triton's CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.lru_cache(maxsize=None)
def capability(index: int = 0) -> tuple[int, int]:
    """(major, minor) of CUDA device `index`; (0, 0) without CUDA or under the interpreter."""
    if interpreting() or not torch.cuda.is_available():
        return (0, 0)
    return torch.cuda.get_device_capability(index)


def is_hopper_or_newer() -> bool:
    return capability()[0] >= 9


@functools.lru_cache(maxsize=None)
def num_sms(index: int = 0) -> int:
    if interpreting() or not torch.cuda.is_available():
        return 4
    return torch.cuda.get_device_properties(index).multi_processor_count


def has_tensor_descriptors() -> bool:
    """Host-side TMA descriptors: Triton >= 3.4 on an sm_90+ GPU (never under the interpreter)."""
    if interpreting() or not is_hopper_or_newer():
        return False
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    return True


# Precision of fp32 dots.  Triton's default is tf32 (like cuDNN's default for fp32 convolutions);
# the matmul/conv cases' fp32 tolerances allow its rounding.  The interpreter computes in ieee.
FP32_DOT_PRECISION = os.environ.get("FUSEBENCH_FP32_PRECISION", "tf32")


def dot_precision(dtype: torch.dtype) -> str:
    """The input_precision passed to tl.dot for operands of `dtype`, as stored in describe()."""
    if dtype != torch.float32:
        return "ieee"  # fp16/bf16 products are exact in the fp32 accumulator
    return "ieee" if interpreting() else FP32_DOT_PRECISION


def precision_note(dtype: torch.dtype) -> str:
    return {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype, f"fp32 {dot_precision(dtype)}")


def check_device(dtype: torch.dtype, device: str) -> str | None:
    """The reason a Triton kernel cannot run on `device` for `dtype`, or None."""
    dev = str(device)
    if dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"dtype {dtype} not supported"
    if interpreting():
        if dtype == torch.bfloat16:
            return "Triton's interpreter cannot do bf16 arithmetic"
        return None
    if not dev.startswith("cuda"):
        return "Triton kernels need a CUDA device (or TRITON_INTERPRET=1 for the CPU interpreter)"
    if not torch.cuda.is_available():
        return "CUDA is not available"
    if dtype == torch.bfloat16 and capability()[0] < 8:
        return "bf16 dots need sm_80 or newer"
    return None


def next_pow2(n: int, floor: int = 16) -> int:
    return max(floor, triton.next_power_of_2(int(n)))


@triton.jit
def grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Map a linear program id to a (pid_m, pid_n) tile, GROUP_M rows of tiles at a time.

    Programs that run together then share the same few row-panels of A and sweep the
    column-panels of B, so both stay in L2 (see the matmul tutorial's "L2 cache optimizations").
    """
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    # the last group may have fewer than GROUP_M rows of tiles
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


def _config_bench(fn, quantiles=None):
    """Time one autotuning config as the cells are timed (measure.timing: L2 flushed, the GPU spun
    before each start event so that host launch cost stays out), ~5 ms warm-up and ~20 ms of runs.

    triton.testing.do_bench times back-to-back launches: where a small problem's GPU time is
    below the Python launch cost (128x4096x4096 GEMM: ~20 us), it ranks configs by host overhead."""
    st = gpu_time_stats(fn, "cuda", budget_ms=20.0, warmup_ms=5.0, max_reps=200)
    ms = {0.5: st.median_us / 1e3, 0.2: st.q20_us / 1e3, 0.8: st.q80_us / 1e3}
    return [ms.get(q, ms[0.5]) for q in quantiles] if quantiles else ms[0.5]


def autotune(configs, key, **kwargs):
    """triton.autotune whose configs are timed as the cells are (_config_bench), where this Triton
    accepts `do_bench`."""
    if "do_bench" in inspect.signature(triton.autotune).parameters:
        kwargs.setdefault("do_bench", _config_bench)
    return triton.autotune(configs=configs, key=key, **kwargs)


# ------------------------------------------------------------------------------------------------
# Choosing between whole implementations (e.g. pointer vs TMA vs split-K GEMM, cuDNN+epilogue vs
# implicit GEMM): like autotuning, but across different kernels.  Each candidate runs once (compiling
# it and running its triton.autotune), then is timed; the winner is remembered per key.  The first
# candidate is the default, used without timing under the interpreter, without CUDA and during
# CUDA-graph capture.
#
# Timing is utils.gpu_time_ms, the cells' own method (measure.timing: L2 flushed, the GPU spun before
# each start event), not triton.testing.do_bench: a candidate is a whole Python call (descriptor
# set-up, autotuner dispatch, one to three launches) whose host cost exceeds a small problem's GPU
# time, and back-to-back do_bench timing measured that host launch overhead instead (on an H200,
# 128x4096x4096 fp16: ptr 76.6us, tma 54.4us, split-K 125us reported, where the GPU ran ptr in ~23us).

_FASTEST: dict = {}

# per-candidate timing budget (ms of timed runs), as utils.autotune uses
FASTEST_BUDGET_MS = 5.0


def fastest(key, candidates: dict, device=None) -> str:
    """Name of the fastest zero-argument callable in `candidates` for `key` (timed once, then cached).

    `device`: the CUDA device the candidates run on (default: the current one), on which their GPU
    time is measured; a non-CUDA device gets the first candidate, untimed.  A non-default candidate
    that fails (e.g. out of shared memory) gets inf."""
    hit = _FASTEST.get(key)
    if hit is not None:
        return hit[0]
    names = list(candidates)
    if len(names) == 1 or interpreting() or not torch.cuda.is_available() \
            or torch.cuda.is_current_stream_capturing() \
            or (device is not None and torch.device(device).type != "cuda"):
        return names[0]
    if device is None:
        device = f"cuda:{torch.cuda.current_device()}"
    times = {}
    for i, name in enumerate(names):
        try:
            candidates[name]()  # compiles and autotunes outside the timed runs
            times[name] = gpu_time_ms(candidates[name], device, FASTEST_BUDGET_MS)
        except Exception:
            if i == 0:
                raise  # the default must work
            times[name] = float("inf")
    best = min(names, key=lambda n: times[n])
    _FASTEST[key] = (best, times)
    return best


def fastest_record(key):
    """(chosen name, {name: ms}) if `key` has been timed, else None."""
    return _FASTEST.get(key)


def fastest_records() -> dict:
    return dict(_FASTEST)
