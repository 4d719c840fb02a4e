"""Helpers shared by the compute-bound kernels (matmul, conv, attention).

Nothing here launches work on its own: the grouped ("super-grouping") program order used by the
GEMM-like kernels, dot precision, and the `supports` checks that every wrapper in matmul.py /
conv.py / attention.py shares.  Device facts are in device.py, the tuner in tuning.py.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fusebench import settings
from fusebench.kernels.device import capability, is_hopper_or_newer, is_interpreter


def has_tensor_descriptors() -> bool:
    """Host-side TMA descriptors: Triton >= 3.4 on an sm_90+ GPU (never under the interpreter)."""
    if is_interpreter() or not is_hopper_or_newer():
        return False
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    return True


# Precision of fp32 dots.  Triton's default is tf32 (like cuDNN's default for fp32 convolutions);
# the matmul/conv cases' fp32 tolerances allow its rounding.  The interpreter computes in ieee.
FP32_DOT_PRECISION = settings.current().fp32_precision


def dot_precision(dtype: torch.dtype) -> str:
    """The input_precision passed to tl.dot for operands of `dtype`, as stored in describe()."""
    if dtype != torch.float32:
        return "ieee"  # fp16/bf16 products are exact in the fp32 accumulator
    return "ieee" if is_interpreter() else FP32_DOT_PRECISION


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
