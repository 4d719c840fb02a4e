"""Every registered memory-bound kernel through the registry (the case's exact signature), with its
heuristic plan: odd shapes, fp32/fp16/bf16, strided inputs."""
import pytest
import torch

from fusebench.kernels import KERNELS
from kernel_checks import ALL, check, gpu, inputs, strided


# The interpreter evaluates padding lanes too (exp(-inf - -inf) and the like): harmless NaNs
# in masked-off lanes make numpy warn.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("shape", [(3, 5), (7, 300), (33, 1030)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", ALL)
def test_registered_kernel(name, shape, dtype):
    assert KERNELS[name].interpretable
    args = inputs(name, shape, dtype)
    check(name, KERNELS[name].fn(*args), args)


@pytest.mark.parametrize("name", ALL)
def test_bf16(name):
    args = inputs(name, (5, 70), torch.bfloat16)
    check(name, KERNELS[name].fn(*args), args)


@pytest.mark.parametrize("how", ["rows", "cols"])
@pytest.mark.parametrize("name", ALL)
def test_noncontiguous_inputs(name, how):
    args = tuple(strided(a, how) if isinstance(a, torch.Tensor) else a
                 for a in inputs(name, (9, 260), torch.float32, seed=3))
    check(name, KERNELS[name].fn(*args), args)


@gpu
@pytest.mark.parametrize("shape", [(4, 70000), (600, 20000), (1000, 3000), (20000, 100), (100, 300)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", ALL)
def test_gpu_sizes(name, shape, dtype):
    args = inputs(name, shape, dtype, seed=8)
    check(name, KERNELS[name].fn(*args), args)
