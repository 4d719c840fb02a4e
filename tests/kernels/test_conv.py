"""The convolution kernels: implicit GEMM, epilogues, batch-norm folding, the path choice."""
import itertools

import pytest
import torch

from fusebench import settings
from fusebench.cases.base import get_case
from fusebench.kernels import KERNELS
import fusebench.kernels.conv as kconv
from fusebench.kernels import batchnorm, conv1x1, conv_batchnorm, conv_epilogue, conv_igemm, conv_paths
import fusebench.kernels.gemm_utils as gu
from fusebench.kernels.gemm_configs import SMEM_STAGING_LIMIT, config, staging_bytes
from fusebench.kernels.launch import STATE
from compute_checks import DEVICE, DTYPES, gpu, needs_gpu, run_case, run_twice, spy


CONV_SHAPES = [(2, 8, 9, 9, 16, r, s, cl) for r, s, cl in itertools.product((3, 1), (1, 2), (0, 1))]


def _conv_paths(shape):
    paths = ["cudnn", "igemm"]
    if shape[5] == 1 and shape[6] == 1 and shape[7] == 1:
        paths.append("gemm")
    if not shape[7]:
        paths.append("cudnn_cl")
    if shape[5] == 1 and shape[6] == 1 and not shape[7]:
        paths += ["gemm_nchw", "gemm_nchw_cl"]
    return paths


@pytest.fixture
def conv_settings(monkeypatch):
    """force(path, bn): FUSEBENCH_CONV_PATH and FUSEBENCH_CONV_BN set and read again, as a user
    changes them at run time (settings.refresh); the environment is restored after the test."""
    def force(path="auto", bn="auto"):
        monkeypatch.setenv("FUSEBENCH_CONV_PATH", path)
        monkeypatch.setenv("FUSEBENCH_CONV_BN", bn)
        settings.refresh()

    return force


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16"])
@pytest.mark.parametrize("shape", CONV_SHAPES, ids=lambda s: f"r{s[5]}s{s[6]}{'cl' if s[7] else 'nchw'}")
@pytest.mark.parametrize("name", ["conv_add", "conv_relu", "conv_bn"])
def test_conv(name, shape, dtype, conv_settings):
    # conv_bn: the folded way through every conv path, then BN applied by the epilogue
    for path in _conv_paths(shape):
        conv_settings(path, "folded")
        out = run_case(name, shape, dtype)
        if shape[7]:
            assert out.is_contiguous(memory_format=torch.channels_last) or path == "cudnn"
        else:
            assert out.is_contiguous()  # NCHW in, NCHW out, whichever way it ran
    conv_settings("auto", "auto")
    run_case(name, shape, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("kernel", ["igemm", "conv1x1"])
def test_conv_gemm_configs_fit_shared_memory(kernel, dtype):
    # a channel count below every tile: the fallback is the smallest tile whose pipeline fits;
    # no tile much wider than C_out along the kernel's C_out side
    prune, space, names, side = {
        "igemm": (conv_igemm._prune_igemm, conv_igemm.HOPPER_IGEMM, ("K_OUT", "C"), "BLOCK_N"),
        "conv1x1": (conv1x1._prune, conv1x1.HOPPER_SPACE, ("COUT", "CIN"), "BLOCK_M")}[kernel]
    for cout, cin in ((16, 8), (512, 512)):
        kept = prune([config(*c) for c in space], {"x_ptr": torch.empty(1, dtype=dtype), names[0]: cout, names[1]: cin})
        assert kept and all(staging_bytes(c, dtype.itemsize) <= SMEM_STAGING_LIMIT for c in kept)
        assert all(c.kwargs[side] <= max(64, cout) for c in kept)


@pytest.mark.parametrize("shape", [(2, 8, 9, 9, 16, 3, 1, 0), (2, 8, 9, 9, 16, 3, 1, 1), (3, 5, 7, 6, 1, 1, 1, 1),
                                   (1, 70, 3, 3, 70, 1, 1, 1)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.interpreter
def test_epilogue_kernel_layouts(shape):
    # The flat epilogue: channel i % C (channels_last) or (i // (H * W)) % C (NCHW), a ragged last
    # block.
    n, cin, h, w, cout, r, stride, cl = shape
    g = torch.Generator().manual_seed(0)
    y = torch.randn(n, cout, h, w, generator=g)
    if cl:
        y = y.contiguous(memory_format=torch.channels_last)
    res = torch.randn(n, cout, h, w, generator=g)
    bias = torch.randn(cout, generator=g)
    mean, gamma, beta = (torch.randn(cout, generator=g) for _ in range(3))
    var = torch.rand(cout, generator=g) + 0.5
    bn = (y - mean[:, None, None]) / torch.sqrt(var[:, None, None] + kconv.BN_EPS) * gamma[:, None, None] \
        + beta[:, None, None]
    want = torch.relu(bn + bias[:, None, None] + res)
    got = kconv.epilogue_(y.clone(), bias=bias, residual=res, relu=True, bn=(mean, var, gamma, beta))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 8, 9, 9), (3, 70, 5, 3), (1, 5, 3, 3), (2, 40, 17, 19)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.interpreter
def test_channels_last_copy_and_nchw_epilogue(shape):
    # the channels_last route's kernels, on tiles ragged along channels and pixels: the copy of a
    # dense NCHW x and its weight, and the epilogue from a channels_last y into a new NCHW output
    n, c, h, w = shape
    g = torch.Generator().manual_seed(c)
    x, wt = torch.randn(shape, generator=g), torch.randn(c + 3, c, 3, 3, generator=g)  # copied in one launch
    got = conv_epilogue.to_channels_last_plan(x, wt)(x, wt)
    for a, b in zip(got, (x, wt)):
        assert a.is_contiguous(memory_format=torch.channels_last) and torch.equal(a, b)
    y = torch.randn(shape, generator=g).contiguous(memory_format=torch.channels_last)
    res, bias = torch.randn(shape, generator=g), torch.randn(c, generator=g)
    out = torch.empty(shape)
    bc, bp = conv_epilogue.transpose_tiles(c, h * w)
    grid = (n, -(-h * w // bp), -(-c // bc))
    conv_epilogue._epilogue_to_nchw_kernel[grid](y, out, y, y, y, y, bias, res, c, h * w, kconv.BN_EPS, 0, 1, 1, 1,
                                                 BLOCK_P=bp, BLOCK_C=bc, WAIT=False)
    assert out.is_contiguous()
    torch.testing.assert_close(out, torch.relu(y + bias[:, None, None] + res), rtol=1e-6, atol=1e-6)


def test_fold_bn_matches_batch_norm():
    case = get_case("conv_bn")
    x, w, mean, var, gamma, beta, stride = case.make_inputs((2, 8, 9, 9, 16, 3, 1, 1), torch.float32, DEVICE, 3)
    w2, shift = kconv.fold_bn(w, mean, var, gamma, beta)
    assert w2.is_contiguous(memory_format=torch.channels_last)
    s = gamma / torch.sqrt(var + kconv.BN_EPS)
    torch.testing.assert_close(w2, w * s[:, None, None, None], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(shift, beta - mean * s, rtol=1e-5, atol=1e-6)  # fp32 here


def test_conv_describe_names_path(conv_settings):
    conv_settings("auto", "auto")
    d = KERNELS["conv_relu"].describe
    assert "cudnn" in d((32, 64, 56, 56, 64, 3, 1, 0), torch.float16)
    assert "channels_last" in d((32, 64, 56, 56, 64, 3, 1, 0), torch.float16)
    assert "igemm" in d((32, 64, 56, 56, 64, 3, 1, 1), torch.float16)
    assert "gemm" in d((32, 256, 14, 14, 1024, 1, 1, 1), torch.float16)
    assert "folded" in KERNELS["conv_bn"].describe((32, 64, 56, 56, 64, 3, 1, 1), torch.float16)
    # NCHW 1x1: conv1x1's GEMM, for conv_bn with batch norm in its epilogue
    assert "gemm_nchw" in d((32, 512, 7, 7, 2048, 1, 1, 0), torch.float16)
    assert "one GEMM reading x in place" in KERNELS["conv_bn"].describe((32, 64, 56, 56, 256, 1, 1, 0), torch.float16)


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_gpu_conv(dtype, conv_settings, few_configs):
    for shape in [(4, 64, 56, 56, 64, 3, 1, 1), (4, 128, 28, 28, 128, 3, 2, 1), (4, 256, 14, 14, 1024, 1, 1, 1),
                  (4, 512, 7, 7, 512, 3, 1, 0), (4, 256, 14, 14, 128, 1, 1, 0), (4, 64, 28, 28, 96, 1, 1, 0),
                  (3, 96, 7, 7, 200, 1, 1, 0)]:
        for name in ["conv_add", "conv_relu", "conv_bn"]:
            for path in _conv_paths(shape):
                conv_settings(path)
                run_case(name, shape, dtype)


@pytest.fixture
def fresh_plans(conv_settings):
    # every plan, launcher and tuner choice of the kernel layer forgotten; the settings' defaults
    STATE.clear()
    conv_settings("auto", "auto")


def _spies(monkeypatch, *where):
    """Call records of each (module, function name) in `where`, as one list of lists."""
    return [spy(monkeypatch, module, name) for module, name in where]


def _calls(records) -> int:
    return sum(map(len, records))


@pytest.mark.parametrize("name", ["conv_relu", "conv_bn"])
def test_second_call_takes_the_plan(name, monkeypatch, fresh_plans):
    # channels_last 1x1: two paths (and for conv_bn two ways) to choose from; chosen once per key
    choices = _spies(monkeypatch, (conv_paths, "fastest"), (conv_batchnorm, "fastest"))
    builds = _spies(monkeypatch, (conv_paths, "cudnn_plan"), (conv_paths, "gemm1x1_plan"), (conv_paths, "igemm_plan"),
                    (conv_batchnorm, "_bn_epilogue_plan"), (conv_batchnorm, "_folded_plan"))
    shape = (2, 8, 5, 5, 16, 1, 1, 1)
    run_twice(name, shape, torch.float16)  # fp16: fp32 has one path (cuDNN)
    made = (_calls(choices), _calls(builds))
    assert made[0] >= 1 and made[1] >= 1
    run_case(name, shape, torch.float16, seed=2)
    assert (_calls(choices), _calls(builds)) == made
    run_case(name, (2, 8, 5, 5, 16, 3, 1, 1), torch.float16)  # another key: chosen and built again
    assert _calls(choices) > made[0] and _calls(builds) > made[1]


@pytest.mark.interpreter
def test_a_changed_setting_is_seen_by_the_next_call(monkeypatch, fresh_plans, conv_settings):
    # FUSEBENCH_CONV_PATH and FUSEBENCH_CONV_BN changed at run time (settings.refresh(), no
    # reimport): the next call of the same key takes what the new setting says; back at the first
    # setting, the plan made under it is taken again.  channels_last 1x1 fp16: cuDNN + epilogue
    # first (untimed off the GPU), the 1x1 GEMM the other candidate.
    paths = _spies(monkeypatch, (conv_paths, "cudnn_plan"), (conv_paths, "gemm1x1_plan"))
    ways = _spies(monkeypatch, (conv_batchnorm, "_bn_epilogue_plan"), (conv_batchnorm, "_folded_plan"))
    shape = (2, 8, 5, 5, 16, 1, 1, 1)
    run_case("conv_relu", shape, torch.float16)
    assert list(map(len, paths)) == [1, 0]
    conv_settings("gemm")
    assert "gemm: forced by FUSEBENCH_CONV_PATH" in KERNELS["conv_relu"].describe(shape, torch.float16)
    run_case("conv_relu", shape, torch.float16)
    assert list(map(len, paths)) == [1, 1]
    conv_settings("auto")
    run_case("conv_relu", shape, torch.float16)
    assert list(map(len, paths)) == [1, 1]
    run_case("conv_bn", shape, torch.float16)  # auto: the bn-epilogue way first
    conv_settings("auto", "folded")
    run_case("conv_bn", shape, torch.float16)
    assert list(map(len, ways)) == [1, 1]


def test_nchw_3x3_takes_the_channels_last_route(monkeypatch, fresh_plans, conv_settings):
    # 2-byte NCHW 3x3 convs: conv_fused's first path and conv_bn's bn-epilogue way copy x and w to
    # channels_last and write an NCHW output; NCHW 1x1 convs take conv1x1's GEMM first
    built = spy(monkeypatch, conv_paths, "cudnn_cl_plan")
    conv_settings("auto", "bn-epilogue")
    for module in (conv_paths, conv_batchnorm):  # untimed: the first
        monkeypatch.setattr(module, "fastest", lambda key, candidates, **kw: next(iter(candidates)))
    for name in ("conv_add", "conv_relu", "conv_bn"):
        assert run_case(name, (2, 8, 9, 9, 16, 3, 1, 0), torch.float16).is_contiguous()
    assert len(built) == 3
    run_case("conv_add", (2, 8, 9, 9, 16, 1, 1, 0), torch.float16)
    assert len(built) == 3


@pytest.mark.interpreter
def test_channels_last_route_only_for_contiguous_operands(fresh_plans):
    # the copies read contiguous NCHW x and OIHW w: a channels_last weight beside an NCHW input
    # takes cuDNN's NCHW path instead, and the result is still right
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(2, 8, 9, 9, generator=g), torch.randn(16, 8, 3, 3, generator=g)
    w_cl = w.contiguous(memory_format=torch.channels_last)
    got = kconv.conv_fused(x, w_cl, 1, relu=True, path="cudnn_cl")
    torch.testing.assert_close(got, torch.relu(torch.nn.functional.conv2d(x, w, padding=1)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("path", ["gemm", "igemm", "cudnn"])
def test_forced_paths_on_repeated_calls(path, fresh_plans, conv_settings):
    # the 1x1 GEMM's plan is given the 4-D tensors whose 2-D views it was made for
    conv_settings(path)
    for name in ["conv_add", "conv_relu", "conv_bn"]:
        run_twice(name, (2, 8, 5, 5, 16, 1, 1, 1), torch.float16)


@pytest.mark.interpreter
def test_epilogue_and_fold_plans_reused(monkeypatch, fresh_plans):
    made = spy(monkeypatch, conv_epilogue, "epilogue_plan")
    folds = spy(monkeypatch, batchnorm, "fold_plan")
    test_epilogue_kernel_layouts((2, 8, 9, 9, 16, 3, 1, 1))
    test_epilogue_kernel_layouts((2, 8, 9, 9, 16, 3, 1, 1))
    test_fold_bn_matches_batch_norm()
    test_fold_bn_matches_batch_norm()
    assert (len(made), len(folds)) == (1, 1)


@gpu
@needs_gpu
@pytest.mark.parametrize("multi", ["launches", "graph"])
def test_gpu_conv_plans_on_fresh_tensors(multi, monkeypatch, few_configs, fresh_plans):
    monkeypatch.setattr(gu, "MULTI_KERNEL", multi)
    for shape in [(4, 64, 56, 56, 64, 3, 1, 1), (4, 256, 14, 14, 1024, 1, 1, 1), (4, 512, 7, 7, 512, 3, 1, 0)]:
        for name in ["conv_add", "conv_relu", "conv_bn"]:
            a, b = run_twice(name, shape, torch.float16)
            assert not torch.equal(a, b)
