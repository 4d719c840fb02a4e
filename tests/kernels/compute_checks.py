"""Shared by the tests of the compute-bound kernels (matmul, b2b, conv, attention).

Without a GPU the kernels run under Triton's interpreter at small shapes, in fp32 and fp16 (the
interpreter cannot do bf16).  With a GPU the same tests run on it, and `gpu`-marked tests add bf16
and larger shapes (TMA paths, autotuned configs).  Every output is compared with the case's
float64 reference under the case's tolerance: |out - ref| <= atol * max|ref| + rtol * |ref|.
"""
import os

import pytest
import torch

from fusebench.cases.base import get_case
from fusebench.kernels import KERNELS

ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")


DEVICE = "cuda" if ON_GPU else "cpu"


DTYPES = [torch.float32, torch.float16]


gpu = pytest.mark.gpu


needs_gpu = pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")


def check(case_name, out, args, dtype):
    case = get_case(case_name)
    ref = case.run_reference(args)
    atol, rtol = case.tolerance(dtype)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert out.dtype == dtype
    out64 = out.double().cpu()
    ref = ref.cpu()
    assert torch.isfinite(out64).all(), "NaN or inf in the output"
    err = (out64 - ref).abs()
    bound = atol * ref.abs().max() + rtol * ref.abs()
    bad = err > bound
    assert not bad.any(), (f"{case_name}: {int(bad.sum())} of {bad.numel()} elements out of tolerance, "
                           f"max err {err.max().item():.3e}")


def run_case(case_name, shape, dtype, seed=0):
    case = get_case(case_name)
    args = case.make_inputs(shape, dtype, DEVICE, seed)
    out = KERNELS[case_name].fn(*args)
    check(case_name, out, args, dtype)
    return out


def spy(monkeypatch, obj, name):
    """Replace obj.name by a wrapper that counts its calls; returns the list of calls' args."""
    calls = []
    real = getattr(obj, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(obj, name, counted)
    return calls


def run_twice(case_name, shape, dtype):
    """The registered kernel on two sets of fresh inputs of `shape` (seeds 0 and 1), each checked
    against the reference: the second call takes the plan the first one kept."""
    return [run_case(case_name, shape, dtype, seed=seed) for seed in (0, 1)]
