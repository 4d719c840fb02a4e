"""conv1x1's GEMM: a 1x1 convolution on NCHW tensors writing NCHW with the epilogue."""
import pytest
import torch
import torch.nn.functional as F

import fusebench.kernels.conv as kconv
from fusebench.kernels import conv1x1, conv_paths
from compute_checks import gpu, needs_gpu


def _operands(n, cin, h, w, cout, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(n, cin, h, w, generator=g, device=device).to(dtype)
    wt = (torch.randn(cout, cin, 1, 1, generator=g, device=device) / cin ** 0.5).to(dtype)
    bias, res = torch.randn(cout, generator=g, device=device).to(dtype), torch.randn(n, cout, h, w, generator=g,
                                                                                     device=device).to(dtype)
    mean, gamma, beta = (torch.randn(cout, generator=g, device=device) for _ in range(3))
    var = torch.rand(cout, generator=g, device=device) + 0.5
    return x, wt, bias, res, (mean, var, gamma, beta)


def _check(n, cin, h, w, cout, dtype, device, tol):
    x, wt, bias, res, bn = _operands(n, cin, h, w, cout, dtype, device)
    conv = F.conv2d(x.double(), wt.double())
    normed = F.batch_norm(conv, *(t.double() for t in bn[:2]), *(t.double() for t in bn[2:]), False, 0.0,
                          kconv.BN_EPS)
    for build in (conv_paths.gemm_nchw_plan, conv_paths.gemm_nchw_cl_plan):
        plan, y = build(x, wt, 1, bias, res, True)
        assert y.shape == conv.shape and y.is_contiguous()
        torch.testing.assert_close(y.double(), torch.relu(conv + bias.double()[:, None, None] + res.double()),
                                   rtol=tol, atol=tol)
        plan, y = build(x, wt, 1, None, None, False, bn)
        torch.testing.assert_close(y.double(), normed, rtol=tol, atol=tol)
        # the plan on other tensors of the key
        x2 = x * 2
        torch.testing.assert_close(plan(x2, wt, None, None, bn).double(),
                                   F.batch_norm(F.conv2d(x2.double(), wt.double()), *(t.double() for t in bn[:2]),
                                                *(t.double() for t in bn[2:]), False, 0.0, kconv.BN_EPS),
                                   rtol=tol, atol=tol)


@pytest.mark.interpreter
@pytest.mark.parametrize("shape", [(2, 8, 9, 9, 16), (3, 24, 7, 7, 40), (1, 17, 5, 6, 33), (2, 32, 4, 4, 8)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gemm_nchw_matches_conv(shape):
    # ragged tiles along C_out and the pixels; tiles straddling two images; a K tail (C_in 8, 24, 17)
    # and none (32 with the interpreter's 16-deep K steps)
    _check(*shape, torch.float32, "cpu", 1e-4)


def test_applies_only_to_dense_nchw_1x1_at_stride_1():
    x, wt = torch.empty(2, 8, 5, 5), torch.empty(16, 8, 1, 1)
    assert conv1x1.applies(x, wt, 1)
    assert not conv1x1.applies(x, wt, 2)
    assert not conv1x1.applies(x, torch.empty(16, 8, 3, 3), 1)
    assert not conv1x1.applies(x.contiguous(memory_format=torch.channels_last), wt, 1)


def test_nchw_1x1_candidates():
    # H*W a multiple of 8: x read in place (aligned vectors); else also through a channels_last copy
    paths, _ = kconv.candidate_paths(32, 64, 56, 56, 256, 1, 1, False, torch.float16)
    assert paths == ["gemm_nchw", "cudnn"]
    paths, _ = kconv.candidate_paths(32, 512, 7, 7, 2048, 1, 1, False, torch.float16)
    assert paths[0] == "gemm_nchw_cl" and "gemm_nchw" in paths and "cudnn" not in paths
    assert kconv.candidate_paths(32, 256, 56, 56, 512, 1, 2, False, torch.float16)[0] == ["cudnn"]
    assert kconv.candidate_paths(32, 64, 56, 56, 256, 1, 1, False, torch.float32)[0] == ["cudnn"]


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("shape", [(4, 64, 7, 7, 96), (3, 128, 14, 14, 64), (2, 96, 28, 28, 160), (2, 48, 6, 6, 40),
                                   (5, 256, 5, 5, 130)], ids=lambda s: "x".join(map(str, s)))
def test_gpu_gemm_nchw(shape, dtype):
    # H*W = 49, 196, 784, 36, 25: stores and loads of 1, 4, 8, 4 and 1 elements (the kernel's VEC)
    _check(*shape, dtype, "cuda", 2e-2)

