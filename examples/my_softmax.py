"""Your own Triton kernel in fusebench's grid: a row softmax, registered for the `softmax` case.

    fusebench run softmax --plugin examples/my_softmax.py --impl eager,inductor,triton,my-softmax
    fusebench report

fusebench checks it against a float64 reference on three seeds, times it at every shape and
stores it beside eager, Inductor and fusebench's own kernel.  On a machine without a GPU, Triton
kernels run in Triton's interpreter, which must be switched on before triton is imported; they are
then checked but not timed:

    TRITON_INTERPRET=1 fusebench run softmax --plugin examples/my_softmax.py \
        --impl eager,my-softmax --shapes 64x128 --device cpu
"""
import torch
import triton
import triton.language as tl

import fusebench


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, BLOCK: tl.constexpr):
    # One program per row.  Row r starts at x_ptr + r * x_row_stride; the BLOCK column offsets
    # (BLOCK is n_cols rounded up to a power of two) address its elements, and the mask keeps the
    # columns past n_cols from being read or written.
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    # One pass: the whole row is in registers, so max, exp, sum and the division never re-read it.
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    y = num / tl.sum(num, axis=0)
    tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@fusebench.implementation("my-softmax", cases=["softmax"], triton=True,
                          supports=lambda case, shape, dtype, device: None if shape[1] <= 65536 else
                          "one row per program: rows up to 65536 elements")
def my_softmax(x: torch.Tensor) -> torch.Tensor:
    """A one-pass Triton row softmax, one program per row (examples/my_softmax.py)."""
    assert x.stride(1) == 1, "rows must be contiguous"
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(n_cols)
    # More warps for longer rows, so that each thread holds at most a few dozen elements.
    num_warps = 4 if block <= 2048 else 8 if block <= 8192 else 16
    softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=block, num_warps=num_warps)
    return y
