"""Launch: the JIT's first call, then the compiled kernel's launcher with the same constants."""
import pytest
import torch
import triton
import triton.language as tl

from fusebench.kernels import launch as launch_module
from fusebench.kernels.launch import Launch, aligned16
from kernel_checks import DEVICE, gpu


@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, n, a, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@pytest.mark.parametrize("n", [1, 100, 1000])
def test_repeated_calls_match_the_reference(n):
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    launch = Launch(_axpy, (triton.cdiv(n, 128),), dict(BLOCK=128, num_warps=4))
    for a in (2.0, -0.5, 3.0):  # new tensors and scalars on every call, as a caller passes them
        out = torch.empty_like(x)
        launch(x, y, out, n, a)
        torch.testing.assert_close(out, a * x + y)
        x, y = y, torch.randn(n, device=DEVICE)


def test_alignment_key():
    t = torch.zeros(8)
    assert aligned16(t, t[1:], None) == (True, False, False)


@gpu
def test_the_second_call_takes_the_compiled_kernel():
    x = torch.randn(1000, device="cuda")
    launch = Launch(_axpy, (8,), dict(BLOCK=128, num_warps=4))
    out = torch.empty_like(x)
    launch(x, x, out, 1000, 1.0)
    assert launch.kernel is not None  # else this Triton's internals differ and every call pays the JIT
    assert not launch_module._hooks_installed()  # else every call takes the JIT path
    out2 = torch.empty_like(x)
    launch(x, out, out2, 1000, 2.0)
    torch.testing.assert_close(out2, 2 * x + out)


def test_an_empty_hook_chain_is_no_hook():
    class Chain:
        def __init__(self, calls):
            self.calls = calls

    assert not launch_module._hook_set(None) and not launch_module._hook_set(Chain([]))
    assert launch_module._hook_set(Chain([print])) and launch_module._hook_set(print)
