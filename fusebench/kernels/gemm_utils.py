"""Helpers shared by the compute-bound kernels (matmul, conv, attention).

The grouped ("super-grouping") program order used by the GEMM-like kernels, dot precision, the
`supports` checks that every wrapper in matmul.py / conv.py / attention.py shares, and what their
per-call fast paths are built from: the problem key (`launch.signature`), a `Launch` of the config a
triton.autotune chose (`tuned_launch`, TMA descriptors given as geometry), and the CUDA-graph
option for multi-kernel paths (`GraphCall`).
Device facts are in device.py, the tuner in tuning.py, the launcher in launch.py.
"""
from __future__ import annotations

from typing import Callable

import torch
import triton
import triton.language as tl

from fusebench import settings
from fusebench.kernels.device import capability, is_hopper_or_newer, is_interpreter
from fusebench.kernels.launch import Launch


def has_tensor_descriptors() -> bool:
    """Host-side TMA descriptors: Triton >= 3.4 on an sm_90+ GPU (never under the interpreter)."""
    if is_interpreter() or not is_hopper_or_newer():
        return False
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    return True


def dot_precision(dtype: torch.dtype) -> str:
    """The input_precision passed to tl.dot for operands of `dtype`, as stored in describe().  For
    fp32 operands FUSEBENCH_FP32_PRECISION (settings.fp32_precision, read at each call: a plan's
    first call), by default tf32, Triton's default as cuDNN's for fp32 convolutions; the
    matmul/conv cases' fp32 tolerances allow its rounding.  The interpreter computes in ieee."""
    if dtype != torch.float32:
        return "ieee"  # fp16/bf16 products are exact in the fp32 accumulator
    return "ieee" if is_interpreter() else settings.current().fp32_precision


def precision_note(dtype: torch.dtype) -> str:
    return {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype, f"fp32 {dot_precision(dtype)}")


def check_device(dtype: torch.dtype, device: str) -> str | None:
    """The reason a Triton kernel cannot run on `device` for `dtype`, or None."""
    dev = str(device)
    if dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"dtype {dtype} not supported"
    if is_interpreter():
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


# ------------------------------------------------------------------------------------------------
# Per-call fast paths.  Each wrapper keeps a dict {problem key: plan}; a plan is a function of the
# call's tensors that allocates the outputs and launches, everything else (implementation, config,
# grid, integer arguments) decided when the key was first met.


def _unwrap(kernel):
    """The JIT function under triton.autotune / triton.heuristics wrappers, and the heuristics met
    on the way (outermost first)."""
    heuristics = []
    fn = kernel
    while isinstance(fn, (triton.runtime.Autotuner, triton.runtime.Heuristics)):
        if isinstance(fn, triton.runtime.Heuristics):
            heuristics.append(fn)
        fn = fn.fn
    return fn, heuristics


def tuned_launch(kernel, grid: Callable[[dict], tuple], args: tuple, constants: dict,
                 descriptors: dict | None = None) -> Launch:
    """A `Launch` of the JIT function under the triton.autotune'd `kernel` with the config its
    autotuner chose at its last run (`best_config`), which must have been on `args` (runtime
    arguments, in signature order) and `constants`: the same key, so the same config.

    triton.autotune's own call builds the argument dict, computes its key and looks the config up
    on every call; the Launch does none of that.  A config's pre_hook is not run (the TMA
    wrappers give the Launch their descriptors' geometry, block shapes included: `descriptors`)."""
    config = kernel.best_config
    constants = {**constants, **config.all_kwargs()}
    fn, heuristics = _unwrap(kernel)
    for h in heuristics:  # e.g. EVEN_K: values computed from the arguments and the config
        named = {**dict(zip(h.arg_names, args)), **constants}
        for name, rule in h.values.items():
            constants[name] = rule(named)
    return Launch(fn, grid(constants), constants, descriptors)


# How a path of several kernels (cuDNN conv + epilogue, BN fold + conv, two GEMMs, split-K's
# GEMM + reduction) is launched from its cached plan: "launches" (each kernel launched in turn, the
# default) or "graph" (the plan captured once per key in a CUDA graph and replayed: one launch of
# the host, plus a copy of each input into the graph's buffers and of the output out of them).
# From Python the copies cost more than the launches they save (docs/kernels.md, 'What every
# kernel shares').
MULTI_KERNEL = "launches"
_capturing = [0]  # GraphCalls being built: the plans made meanwhile are captured in theirs, not in their own


def graph_capturable(t: torch.Tensor) -> bool:
    """Whether a multi-kernel plan on `t`'s device is to be wrapped in a GraphCall."""
    return (MULTI_KERNEL == "graph" and t.is_cuda and not is_interpreter() and not _capturing[0]
            and not torch.cuda.is_current_stream_capturing())


class GraphCall:
    """`fn(*args)` captured in a CUDA graph on static copies of the tensor arguments (same shapes
    and strides); a call copies its tensors in, replays, and returns a copy of the
    output, so that the caller owns it and the next replay does not overwrite it.  Called while
    another GraphCall is being captured, it runs `fn` itself (into the other's graph)."""

    def __init__(self, fn: Callable, args: tuple):
        self.fn = fn
        self.slots = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        self.static = list(args)
        for i in self.slots:
            a = args[i]
            self.static[i] = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device).copy_(a)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        _capturing[0] += 1
        try:
            with torch.cuda.stream(side):  # compiles and tunes outside the capture
                fn(*self.static)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.out = fn(*self.static)
        finally:
            _capturing[0] -= 1

    def __call__(self, *args):
        if _capturing[0]:
            return self.fn(*args)
        static = self.static
        for i in self.slots:
            static[i].copy_(args[i])
        self.graph.replay()
        return self.out.clone()
