"""Every case's eager function against an independent float64 formula, on the CPU."""
import math

import pytest
import torch
import torch.nn.functional as F

from fusebench.cases import DTYPES, all_cases, get_case

SPEC_CASES = {
    "pointwise_chain", "softmax", "double_softmax", "softmax_backward", "layernorm", "norm_chain",
    "horizontal_reduction_pointwise", "horizontal_reduction_reduction", "matmul_add", "matmul_relu",
    "matmul_add_relu", "matmul_matmul", "conv_add", "conv_relu", "conv_bn", "attention", "bias_dropout_add",
    "bias_dropout_add_transposed", "bias_gelu",
}


def test_catalog_has_every_case_of_the_spec():
    names = {c.name for c in all_cases()}
    assert SPEC_CASES <= names
    for c in (get_case(n) for n in SPEC_CASES):  # (other tests register user cases too)
        assert c.quick_shapes and c.grid_shapes and c.bytes_model and c.flops_model, c.name
        assert 3 <= len(c.quick_shapes) <= 5, c.name


def test_grids_follow_the_plan():
    assert len(get_case("softmax").grid_shapes) == 100
    assert max(max(s[:2]) for s in get_case("matmul_add").grid_shapes) == 16384
    assert all(s[1] == s[2] for s in get_case("matmul_add").grid_shapes)  # K = N
    attn = get_case("attention").grid_shapes
    assert {s[0] for s in attn} == {1, 2, 4, 8, 16, 32} and {s[2] for s in attn} == {2**i for i in range(7, 14)}
    assert {(s[1], s[3]) for s in attn} == {(32, 64), (16, 128)} and {s[4] for s in attn} == {0, 1}
    assert {s[7] for s in get_case("conv_add").grid_shapes} == {0, 1}


def inputs(name, shape, seed=0):
    case = get_case(name)
    return case, tuple(a.double() if torch.is_tensor(a) and a.is_floating_point() else a
                       for a in case.make_inputs(shape, torch.float32, "cpu", seed))


def close(out, ref, tol=1e-9):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for o, r in zip(outs, refs):
        assert o.shape == r.shape
        assert torch.allclose(o, r, rtol=tol, atol=tol * float(r.abs().max())), float((o - r).abs().max())


SHAPE = (7, 33)


def formula(name, args):
    """Independent float64 formulas, written from the math rather than from the case code."""
    if name == "pointwise_chain":
        (x,) = args
        x1 = x * torch.cos(x)
        return x1 + torch.maximum(x1, torch.cos(x))
    if name in ("softmax", "double_softmax"):
        (x,) = args
        e = torch.exp(x - x.max(1, keepdim=True).values)
        y = e / e.sum(1, keepdim=True)
        if name == "double_softmax":
            e = torch.exp(y - y.max(1, keepdim=True).values)
            y = e / e.sum(1, keepdim=True)
        return y
    if name == "softmax_backward":
        dy, y = args
        # against autograd on the softmax that produced y
        logits = torch.log(y).requires_grad_(True)
        torch.softmax(logits, 1).backward(dy)
        return logits.grad
    if name == "layernorm":
        x, w, b = args
        mu = x.mean(1, keepdim=True)
        var = ((x - mu) ** 2).mean(1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * w + b
    if name == "norm_chain":
        (x,) = args
        for _ in range(3):
            x = x * x.sum(1, keepdim=True)
        return x
    if name == "horizontal_reduction_pointwise":
        (a,) = args
        return a.sum(1), torch.cos(a)
    if name == "horizontal_reduction_reduction":
        (a,) = args
        return a.sum(1), a.max(1).values
    if name in ("bias_dropout_add",):
        inp, bias, res = args
        return inp + bias + res
    if name == "bias_dropout_add_transposed":
        inp, bias_t, res_t = args
        return inp + bias_t.T + res_t.T
    if name == "bias_gelu":
        inp, bias = args
        x = inp + bias
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    raise KeyError(name)


@pytest.mark.parametrize("name", ["pointwise_chain", "softmax", "double_softmax", "softmax_backward", "layernorm",
                                  "norm_chain", "horizontal_reduction_pointwise", "horizontal_reduction_reduction",
                                  "bias_dropout_add", "bias_dropout_add_transposed", "bias_gelu"])
def test_memory_bound_cases_match_formula(name):
    case, args = inputs(name, SHAPE)
    # bias_gelu's constant 0.79788456 is sqrt(2/pi) rounded to 8 digits; softmax_backward's y was
    # rounded to fp32, so it sums to 1 only to fp32 precision
    tol = {"bias_gelu": 1e-7, "softmax_backward": 1e-6}.get(name, 1e-9)
    close(case.fn(*args), formula(name, args), tol=tol)


def test_matmul_cases_match_formula():
    for name, extra in [("matmul_add", "bias"), ("matmul_relu", None), ("matmul_add_relu", "bias")]:
        case, args = inputs(name, (9, 11, 13))
        a, b = args[:2]
        ref = torch.einsum("mk,kn->mn", a, b)
        if extra:
            ref = ref + args[2][None, :]
        if "relu" in name:
            ref = ref.clamp_min(0)
        close(case.fn(*args), ref)
    case, (a, b, c) = inputs("matmul_matmul", (9, 11, 13, 5))
    close(case.fn(a, b, c), torch.einsum("mk,kn,np->mp", a, b, c))


def direct_conv(x, w, stride):
    """Convolution as an explicit sum over the filter taps (padding R // 2)."""
    r = w.shape[-1]
    xp = F.pad(x, (r // 2,) * 4)
    n, _, h, wd = x.shape
    ho, wo = (h + 2 * (r // 2) - r) // stride + 1, (wd + 2 * (r // 2) - r) // stride + 1
    out = torch.zeros(n, w.shape[0], ho, wo, dtype=x.dtype)
    for i in range(r):
        for j in range(r):
            patch = xp[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride]
            out += torch.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


@pytest.mark.parametrize("stride,r,cl", [(1, 3, 0), (2, 3, 1), (1, 1, 0)])
def test_conv_cases_match_formula(stride, r, cl):
    shape = (2, 5, 9, 9, 6, r, stride, cl)
    case, (x, w, res, s) = inputs("conv_add", shape)
    close(case.fn(x, w, res, s), direct_conv(x, w, stride) + res)
    case, (x, w, bias, s) = inputs("conv_relu", shape)
    close(case.fn(x, w, bias, s), (direct_conv(x, w, stride) + bias[None, :, None, None]).clamp_min(0))
    case, (x, w, mean, var, gamma, beta, s) = inputs("conv_bn", shape)
    y = direct_conv(x, w, stride)
    v = lambda t: t[None, :, None, None]  # noqa: E731
    close(case.fn(x, w, mean, var, gamma, beta, s), (y - v(mean)) / torch.sqrt(v(var) + 1e-5) * v(gamma) + v(beta))


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_matches_explicit_math(causal):
    case, (q, k, v, c) = inputs("attention", (2, 3, 17, 8, causal))
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(8)
    if causal:
        s = s + torch.full((17, 17), float("-inf"), dtype=s.dtype).triu(1)
    p = torch.exp(s - s.max(-1, keepdim=True).values)
    ref = torch.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdim=True), v)
    close(case.fn(q, k, v, c), ref)
    close(case.run_reference((q, k, v, c)), ref)
    # the sampled check looks at matching slices of output and reference
    args2, out2 = case.reference_subset((q, k, v, c), ref)
    close(case.run_reference(args2), out2)


def test_inputs_are_seeded_and_not_degenerate():
    for case in (get_case(n) for n in SPEC_CASES):
        shape = case.cpu_shapes[0] if case.family not in ("conv", "mix") or case.name != "attention" else (1, 2, 16, 8, 0)
        if case.family == "conv":
            shape = (1, 4, 6, 6, 4, 3, 1, 0)
        if case.family == "matmul":
            shape = tuple(16 for _ in case.axes)
        a = case.make_inputs(shape, case.default_dtype if case.family not in ("conv",) else torch.float32, "cpu", 3)
        b = case.make_inputs(shape, case.default_dtype if case.family not in ("conv",) else torch.float32, "cpu", 3)
        c = case.make_inputs(shape, case.default_dtype if case.family not in ("conv",) else torch.float32, "cpu", 4)
        tensors = [t for t in a if torch.is_tensor(t)]
        assert all(torch.equal(x, y) for x, y in zip(tensors, [t for t in b if torch.is_tensor(t)])), case.name
        assert any(not torch.equal(x, y) for x, y in zip(tensors, [t for t in c if torch.is_tensor(t)])), case.name
        assert all(t.float().abs().sum() > 0 and t.float().std() > 0 for t in tensors if t.numel() > 1), case.name


def test_models_count_each_input_and_output_once():
    fp32 = DTYPES["fp32"]
    assert get_case("softmax").min_bytes((8192, 8192), fp32) == 2 * 8192 * 8192 * 4  # 256 MiB each way
    assert get_case("layernorm").min_bytes((4, 8), fp32) == (2 * 32 + 2 * 8) * 4
    assert get_case("matmul_add").flops((64, 32, 16), fp32) == 2 * 64 * 32 * 16 + 64 * 32
    assert get_case("attention").flops((1, 1, 4, 2, 1), fp32) == get_case("attention").flops((1, 1, 4, 2, 0), fp32) // 2


def test_a_plugin_loaded_first_in_a_process_claims_only_its_own_cases(tmp_path):
    import subprocess
    import sys

    plugin = tmp_path / "p.py"
    plugin.write_text("import fusebench, torch\n"
                      "@fusebench.case(inputs=lambda s, d, dev, seed: (fusebench.randn(s, d, dev, seed),), shapes=[(4, 4)])\n"
                      "def mine(x):\n    return x * 2\n")
    code = ("import fusebench.cases.base as b\n"
            f"b.load_plugin({str(plugin)!r})\n"
            "print(b.get_case('softmax').plugin, b.get_case('mine').plugin is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["None", "True"], out.stderr[-2000:]
