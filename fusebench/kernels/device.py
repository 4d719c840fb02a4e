"""Facts about the device a kernel runs on, and the size arithmetic every launcher uses.

On the CPU (Triton's interpreter runs programs one after another) the facts are fixed, small
ones -- 4 SMs, sm_90's shared memory -- so that plans, and the tests that check them, are the same
on every machine.
"""
from __future__ import annotations

import functools

import torch

from fusebench import settings

# Registers of one SM (every GPU fusebench targets, sm_70 to sm_90).
REGISTERS_PER_SM = 65536
_CPU_SMS = 4
_SM90_SHARED_PER_PROGRAM = 232448


def is_interpreter() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return settings.current().interpret


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(n: int, floor: int = 1) -> int:
    """The least power of two >= n, and >= floor."""
    return max(floor, 1 if n <= 1 else 1 << (int(n) - 1).bit_length())


def prev_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n).bit_length() - 1)


def _on_gpu(device) -> bool:
    if is_interpreter() or not torch.cuda.is_available():
        return False
    return device is None or isinstance(device, int) or torch.device(device).type == "cuda"


def _index(device) -> int:
    if isinstance(device, int):
        return device
    dev = torch.device(device) if device is not None else None
    return dev.index if dev is not None and dev.index is not None else torch.cuda.current_device()


@functools.lru_cache(maxsize=None)
def _props(index: int):
    return torch.cuda.get_device_properties(index)


def num_sms(device=None) -> int:
    """Streaming multiprocessors of `device` (a torch device, its name, or a CUDA index; None:
    the current CUDA device); 4 on the CPU and under the interpreter."""
    return _props(_index(device)).multi_processor_count if _on_gpu(device) else _CPU_SMS


def shared_memory_per_program(device=None) -> int:
    """The most shared memory one program may take (Triton's driver: the opt-in limit per block,
    227 KiB on sm_90); sm_90's on the CPU."""
    if not _on_gpu(device):
        return _SM90_SHARED_PER_PROGRAM
    from triton.runtime import driver

    return driver.active.utils.get_device_properties(_index(device))["max_shared_mem"]


@functools.lru_cache(maxsize=None)
def capability(index: int = 0) -> tuple[int, int]:
    """(major, minor) of CUDA device `index`; (0, 0) without CUDA or under the interpreter."""
    return torch.cuda.get_device_capability(index) if _on_gpu(index) else (0, 0)


def is_hopper_or_newer() -> bool:
    return capability()[0] >= 9


def dependent_launch(device=None) -> bool:
    """Whether a kernel on `device` may be launched as a programmatic dependent of the one before
    it (Triton's launch_pdl; sm_90 and later): it starts as that one's programs finish, or say
    they may, and waits for it with gdc_wait."""
    return _on_gpu(device) and capability(_index(device))[0] >= 9


def name(device=None) -> str:
    """The device's name as the tuning cache keys it ("cpu" off the GPU)."""
    return _props(_index(device)).name if _on_gpu(device) else "cpu"
