"""The accuracy policy: fp32 cells whose GEMMs or convolutions may run in TF32 are judged with
TF32's tolerance and say so; every cell's error is also held against eager's on the same inputs.

On the CPU TF32 never applies: the policy is tested directly with a TF32-sized error (a convolution
computed on inputs rounded to TF32's 10-bit mantissa, as cuDNN's TF32 kernels do), a plugin
convolution case runs end to end with its tolerance named, and a GPU test runs the real thing."""
from __future__ import annotations

import textwrap

import pytest
import torch
import torch.nn.functional as F

import fusebench
from fusebench.measure.accuracy import (BASELINE_ERROR_FACTOR, TF32_TOLERANCE, compare, error_vs_baseline,
                                        heavy_ops, op_kind, tolerance_policy)

FP32 = (1e-5, 1e-4)  # fp32's default tolerance (cases/base.py)
DEFAULTS = {"matmul_allow_tf32": False, "cudnn_allow_tf32": True, "float32_matmul_precision": "highest"}
gpu = pytest.mark.gpu


def to_tf32(x: torch.Tensor) -> torch.Tensor:
    """x rounded to TF32 (10 explicit mantissa bits), as a TF32 tensor core reads fp32 operands."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def conv_block(x, w, b):
    """A convolution followed by a norm and an activation, as the small fusion models people write."""
    return F.gelu(F.group_norm(F.conv2d(x, w, b, padding=1), 8))


def inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(4, 64, 16, 16, generator=g), torch.randn(64, 64, 3, 3, generator=g) / 24,
            torch.randn(64, generator=g))


def test_a_tf32_sized_error_fails_fp32s_tolerance_and_passes_the_policys():
    x, w, b = inputs()
    ref = conv_block(x.double(), w.double(), b.double())
    tf32_out = F.gelu(F.group_norm(F.conv2d(to_tf32(x), to_tf32(w), b, padding=1), 8))
    ops = heavy_ops(conv_block, (x, w, b))
    assert ops == {"conv"}
    tol = tolerance_policy(FP32, FP32, torch.float32, "cuda", ops, switches=DEFAULTS, capability=(9, 0))
    assert tol.kind == "tf32" and (tol.atol, tol.rtol) == TF32_TOLERANCE
    assert "TF32 tolerance (atol 0.002, rtol 0.01) instead of fp32's (atol 1e-05, rtol 0.0001)" in tol.note
    assert "torch.backends.cudnn.allow_tf32=True (PyTorch's default)" in tol.note
    assert not compare(tf32_out, ref, *FP32).passed  # what a user saw: a wall of mismatches
    assert compare(tf32_out, ref, tol.atol, tol.rtol).passed
    # and eager in full fp32 stays far inside either
    assert compare(conv_block(x, w, b), ref, *FP32).passed


@pytest.mark.parametrize("device,ops,switches,capability,kind,says", [
    ("cpu", {"conv"}, DEFAULTS, None, "fp32", "no TF32 on the CPU"),
    ("cuda", {"gemm"}, DEFAULTS, (9, 0), "fp32", "TF32 is off (torch.backends.cuda.matmul.allow_tf32=False"),
    ("cuda", {"gemm"}, {**DEFAULTS, "float32_matmul_precision": "high"}, (9, 0), "tf32", "its GEMMs may run in TF32"),
    ("cuda", {"conv"}, {**DEFAULTS, "cudnn_allow_tf32": False}, (9, 0), "fp32", "cudnn.allow_tf32=False"),
    ("cuda", {"conv"}, DEFAULTS, (7, 0), "fp32", "this GPU has no TF32 (compute capability 7.0)"),
    ("cuda", {"gemm", "conv"}, DEFAULTS, (8, 0), "tf32", "its GEMMs and convolutions may run in TF32"),
])
def test_when_tf32_applies(device, ops, switches, capability, kind, says):
    tol = tolerance_policy(FP32, FP32, torch.float32, device, frozenset(ops), switches=switches, capability=capability)
    assert tol.kind == kind and says in tol.note
    assert (tol.atol, tol.rtol) == (TF32_TOLERANCE if kind == "tf32" else FP32)


def test_cells_without_gemms_or_other_dtypes_keep_their_own_tolerance_and_no_note():
    for dtype, ops in ((torch.float32, frozenset()), (torch.bfloat16, frozenset({"gemm"}))):
        tol = tolerance_policy((1e-2, 5e-2), (1e-2, 5e-2), dtype, "cuda", ops, switches=DEFAULTS, capability=(9, 0))
        assert (tol.atol, tol.rtol, tol.note) == (1e-2, 5e-2, "")
    # a case whose own fp32 tolerance already allows TF32 keeps it, and says so
    tol = tolerance_policy((4e-3, 2e-2), (4e-3, 2e-2), torch.float32, "cuda", frozenset({"conv"}), switches=DEFAULTS,
                           capability=(9, 0))
    assert (tol.atol, tol.rtol, tol.kind) == (4e-3, 2e-2, "tf32") and "the case's own, which allows TF32" in tol.note
    # an implementation that says it computes in TF32 gets TF32's tolerance whatever PyTorch's switches
    tol = tolerance_policy(FP32, FP32, torch.float32, "cuda", frozenset({"gemm"}), note="tf32 dots",
                           switches={**DEFAULTS, "cudnn_allow_tf32": False}, capability=(9, 0))
    assert tol.kind == "tf32" and "its note says so" in tol.note


def test_heavy_ops_names_gemms_and_convolutions():
    assert op_kind("addmm") == op_kind("bmm") == op_kind("_scaled_dot_product_efficient_attention") == "gemm"
    assert op_kind("convolution") == op_kind("cudnn_convolution") == "conv"
    assert op_kind("softmax") is op_kind("add") is None
    a = torch.randn(8, 8)
    assert heavy_ops(lambda a: F.linear(a, a).relu(), (a,)) == {"gemm"}
    assert heavy_ops(lambda a: a.softmax(-1), (a,)) == frozenset()
    assert heavy_ops(lambda a: a[a > 0].sum(), (a,)) == frozenset()  # data-dependent shapes: still read


def test_error_against_eager():
    assert error_vs_baseline(4e-7, 2e-7, torch.float32) == pytest.approx(2.0)
    # an exact eager (no error) is floored at the dtype's epsilon: 1 ulp is not "infinitely worse"
    assert error_vs_baseline(torch.finfo(torch.float32).eps, 0.0, torch.float32) == pytest.approx(1.0)
    assert error_vs_baseline(float("nan"), 1e-7, torch.float32) != error_vs_baseline(1e-7, 1e-7, torch.float32)
    assert error_vs_baseline(1e-7, None, torch.float32) is None
    assert BASELINE_ERROR_FACTOR == 4.0


PLUGIN = textwrap.dedent('''
    import torch
    import torch.nn.functional as F
    import fusebench

    def _inputs(shape, dtype, device, seed):
        n, c, h = shape
        return (fusebench.randn((n, c, h, h), dtype, device, seed),
                fusebench.randn((c, c, 3, 3), dtype, device, seed + 1, scale=1 / (3 * c ** 0.5)),
                fusebench.randn((c,), dtype, device, seed + 2))

    @fusebench.case(inputs=_inputs, shapes=[(2, 32, 12)])
    def policy_conv_block(x, w, b):
        return F.gelu(F.group_norm(F.conv2d(x, w, b, padding=1), 8))

    @fusebench.implementation("policy-sloppy", cases=["policy_conv_block"])
    def sloppy(x, w, b):  # right within fp32's tolerance, but noisier than eager
        out = F.gelu(F.group_norm(F.conv2d(x, w, b, padding=1), 8))
        return out + 1.5e-6 * out.abs().max() * torch.sign(out)
''')


@pytest.fixture
def conv_plugin(tmp_path):
    from fusebench.cases.base import _REGISTRY
    from fusebench.impls.base import _IMPLS

    path = tmp_path / "policy_conv.py"
    path.write_text(PLUGIN)
    yield str(path)
    _REGISTRY.pop("policy_conv_block", None)
    _IMPLS.pop("policy-sloppy", None)


def test_fp32_conv_plugin_case_is_ok_with_its_tolerance_named(conv_plugin, db):
    df = fusebench.run(["policy_conv_block"], impls=["eager", "policy-sloppy"], dtype="fp32", db=db,
                       plugins=[conv_plugin], isolate=False, metrics="none",
                       timing=fusebench.api.TimingSettings(warmup_ms=1, rep_ms=2, host_max_ms=5))
    eager, sloppy = (df[df.impl == i].iloc[0] for i in ("eager", "policy-sloppy"))
    for row in (eager, sloppy):
        assert row.status == "ok" and row.tolerance == "fp32" and (row.atol, row.rtol) == FP32
        assert "fp32 tolerance (atol 1e-05, rtol 0.0001): its convolutions run in full fp32 here (no TF32 on the CPU)" \
            in row.note
    assert eager.err_vs_eager == 1.0
    assert sloppy.err_vs_eager > BASELINE_ERROR_FACTOR and "less accurate than eager" in sloppy.note


@gpu
@pytest.mark.slow
def test_gpu_fp32_conv_plugin_case_under_default_settings(conv_plugin, db):
    assert torch.backends.cudnn.allow_tf32  # PyTorch's default
    df = fusebench.run(["policy_conv_block"], impls=["eager", "inductor"], dtype="fp32", shapes="32x128x28", db=db,
                       plugins=[conv_plugin], device="cuda")
    for row in df.itertuples():
        assert row.status == "ok", (row.impl, row.reason)
        assert row.tolerance == "tf32" and "torch.backends.cudnn.allow_tf32=True" in row.note
    info = fusebench.api.Store.open(db, create=False).run_info(int(df.run_id.iloc[0]))
    assert '"cudnn_allow_tf32": true' in info["precision"]
