"""The accuracy comparison: the same verdict and errors as a plain masked comparison."""
import pytest
import torch

from fusebench.measure import accuracy
from fusebench.measure.accuracy import compare


def masked_compare(out, ref, atol, rtol):
    """The definition, written the obvious way: boolean selections of the finite elements."""
    o, r = out.reshape(-1).double(), ref.reshape(-1).double()
    finite_r = r[torch.isfinite(r)]
    ref_max = float(finite_r.abs().max()) if finite_r.numel() else 0.0
    bad = (~torch.isfinite(o) & torch.isfinite(r)) | (~torch.isfinite(r) & (o != r))
    ok = torch.isfinite(o) & torch.isfinite(r)
    diff = (o - r).abs()[ok]
    max_abs = float(diff.max()) if diff.numel() else 0.0
    ratio = float((diff / (atol * ref_max + rtol * r[ok].abs()).clamp_min(1e-300)).max()) if diff.numel() else 0.0
    return max_abs, ratio, int(bad.sum())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("poison", [None, "nan_out", "inf_out", "nan_ref", "-inf_both"])
def test_compare_matches_the_masked_definition(dtype, poison):
    g = torch.Generator().manual_seed(hash((str(dtype), poison)) % 1000)
    for n in (1, 7, 300):
        ref = torch.randn(n, dtype=torch.float64, generator=g) * 5
        out = (ref + torch.randn(n, dtype=torch.float64, generator=g) * 1e-3).to(dtype)
        if poison == "nan_out":
            out[n // 2] = float("nan")
        elif poison == "inf_out":
            out[0] = float("inf")
        elif poison == "nan_ref":
            ref[n - 1] = float("nan")
        elif poison == "-inf_both":
            ref[0], out[0] = -float("inf"), -float("inf")
        kept = out.clone()
        got = compare(out, ref, 1e-4, 1e-3)
        max_abs, ratio, nonfinite = masked_compare(out, ref, 1e-4, 1e-3)
        assert (got.max_abs_err, got.tol_ratio, got.nonfinite) == (max_abs, ratio, nonfinite)
        assert got.passed == (nonfinite == 0 and ratio <= 1.0)
        assert torch.equal(out.nan_to_num(), kept.nan_to_num())  # the output is never written


def test_compare_takes_the_fast_path_only_where_every_element_is_finite(monkeypatch):
    # the masked path is the one that sees non-finite elements: a chunk with one NaN must take it
    calls = []
    real_where = torch.where
    monkeypatch.setattr(accuracy.torch, "where", lambda *a: calls.append(1) or real_where(*a))
    ref = torch.randn(64, dtype=torch.float64)
    assert compare(ref.float(), ref, 1e-5, 1e-4).passed
    first = len(calls)  # ref_max's pass only
    out = ref.float()
    out[3] = float("nan")
    acc = compare(out, ref, 1e-5, 1e-4)
    assert not acc.passed and acc.nonfinite == 1 and len(calls) > 2 * first


def test_compare_chunks_agree_with_one_pass(monkeypatch):
    ref = torch.randn(1000, dtype=torch.float64)
    out = (ref * (1 + 1e-6)).float()
    out[990] += 1.0  # the worst element in the last chunk
    whole = compare(out, ref, 1e-5, 1e-4)
    monkeypatch.setattr(accuracy, "CPU_CHUNK", 128)
    chunked = compare(out, ref, 1e-5, 1e-4)
    assert (whole.max_abs_err, whole.tol_ratio, whole.passed) == (chunked.max_abs_err, chunked.tol_ratio,
                                                                   chunked.passed)
    assert not whole.passed
