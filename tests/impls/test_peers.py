"""Peer libraries: their availability lines, their versions in the run's environment, and each
adapter's mapping of a case's arguments onto the library's call, with the library faked (a module
in sys.modules whose functions record their arguments and compute the result with torch)."""
import importlib.machinery
import json
import math
import sqlite3
import sys
import types

import pytest
import torch
from typer.testing import CliRunner

import fusebench
from fusebench.cases import get_case
from fusebench.cli import app
from fusebench.impls import get_impl
from fusebench.impls import peers
from fusebench.impls.peers import PeerImplementation
from fusebench.runner.plan import plan_cells


@pytest.fixture(autouse=True)
def _fresh_imports():
    peers._import.cache_clear()
    yield
    peers._import.cache_clear()


def fake(monkeypatch, name, **attrs):
    """Put module `name` (and its parent packages) in sys.modules, with `attrs`."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sub = ".".join(parts[:i])
        if sub not in sys.modules or i == len(parts):
            mod = types.ModuleType(sub)
            mod.__spec__ = importlib.machinery.ModuleSpec(sub, None, is_package=i < len(parts))
            monkeypatch.setitem(sys.modules, sub, mod)
    for k, v in attrs.items():
        setattr(sys.modules[name], k, v)
    return sys.modules[name]


def run_adapter(impl_name, case_name, shape, dtype=torch.float32, seed=0):
    """The peer's prepared function on the case's inputs, and the case's eager output."""
    case = get_case(case_name)
    args = case.make_inputs(shape, dtype, "cpu", seed)
    fn = get_impl(impl_name).prepare(case, shape, dtype, "cpu").fn
    return args, fn, fn(*args), case.fn(*args)


def attention_ref(q, k, v, causal):
    """(batch, seqlen, heads, head_dim) attention, as the libraries define it."""
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                           is_causal=causal)
    return out.transpose(1, 2)


# ---------------------------------------------------------------------------------------------
# availability, listing, planning, environment


@pytest.mark.parametrize("name,install", [
    ("liger", "pip install liger-kernel"), ("quack", "pip install quack-kernels"),
    ("flash-attn", "pip install flash-attn --no-build-isolation"), ("flash-attn-4", "pip install flash-attn-4"),
    ("xformers", "pip install xformers"),
])
def test_a_missing_library_says_how_to_install_it(monkeypatch, name, install):
    monkeypatch.setattr(PeerImplementation, "installed", lambda self: False)
    assert get_impl(name).available("cuda") == f"not installed: {install}"
    assert get_impl(name).available("cpu") == f"not installed: {install}"


def test_an_installed_library_needs_a_gpu_and_an_import_that_works(monkeypatch):
    fake(monkeypatch, "liger_kernel.transformers.functional")
    liger = get_impl("liger")
    assert liger.available("cpu") == "needs a CUDA GPU"
    assert liger.available("cuda") is None

    def broken(name):
        raise OSError("libcute_dsl_runtime.so: cannot open shared object file")

    peers._import.cache_clear()
    monkeypatch.setattr(peers.importlib, "import_module", broken)
    assert liger.available("cuda") == ("import liger_kernel.transformers.functional failed: "
                                       "OSError: libcute_dsl_runtime.so: cannot open shared object file")


def test_list_shows_the_install_line(monkeypatch):
    monkeypatch.setattr(PeerImplementation, "installed", lambda self: False)
    r = CliRunner().invoke(app, ["list"])
    assert r.exit_code == 0, r.output
    rows = [ln for ln in r.output.splitlines() if ln.startswith("│ liger ")]
    assert rows and "no: not installed: pip install liger-kernel" in rows[0], r.output


def test_peers_apply_to_their_cases_only():
    names = {"liger": {"softmax", "layernorm"}, "quack": {"softmax", "layernorm"},
             "flash-attn": {"attention"}, "flash-attn-4": {"attention"}, "xformers": {"attention"}}
    for name, cases in names.items():
        impl = get_impl(name)
        assert {c for c in ("softmax", "layernorm", "attention", "norm_chain", "bias_gelu")
                if impl.applies(get_case(c))} == cases
        assert "has no kernel for norm_chain" in impl.supports(get_case("norm_chain"), (8, 16), torch.float32, "cuda")


def test_no_peer_cell_is_planned_by_default_on_the_cpu():
    cells = plan_cells(["softmax", "attention"], None, "quick", None, "cpu")
    assert cells and not {c.impl for c in cells} & {"liger", "quack", "flash-attn", "flash-attn-4", "xformers"}


def test_peer_versions_are_stored_with_the_run(db, monkeypatch):
    real = peers._distribution_version
    monkeypatch.setattr(peers, "_distribution_version", lambda d: "0.8.5" if d == "liger-kernel" else real(d))
    fusebench.run(["softmax"], impls=["eager"], shapes="8x16", device="cpu", db=db)
    stored = json.loads(sqlite3.connect(db).execute("SELECT peers FROM runs").fetchone()[0])
    assert set(stored) == {"liger-kernel", "quack-kernels", "flash-attn", "flash-attn-4", "xformers"}
    assert stored["liger-kernel"] == "0.8.5"


# ---------------------------------------------------------------------------------------------
# adapters, library faked


def test_liger_adapters(monkeypatch):
    calls = []

    def liger_softmax(x):
        calls.append(("softmax", x))
        return torch.softmax(x, -1)

    def liger_layer_norm(X, W, B, eps):
        calls.append(("layer_norm", X, W, B, eps))
        return torch.nn.functional.layer_norm(X, (X.shape[-1],), W, B, eps)

    fake(monkeypatch, "liger_kernel.transformers.functional", liger_softmax=liger_softmax,
         liger_layer_norm=liger_layer_norm)
    (x,), _, out, ref = run_adapter("liger", "softmax", (8, 16))
    assert calls[-1][1] is x and torch.equal(out, ref)
    (x, w, b), _, out, ref = run_adapter("liger", "layernorm", (8, 16))
    assert calls[-1][1:4] == (x, w, b) and calls[-1][4] == 1e-5
    assert torch.allclose(out, ref)


def test_quack_adapters(monkeypatch):
    calls = []

    def softmax(x):
        calls.append(("softmax", x))
        return torch.softmax(x, 1)

    def layernorm_fwd(x, weight, bias=None, eps=1e-6):
        assert weight.dtype == torch.float32 and bias.dtype == torch.float32, "Weight must be float32"
        calls.append(("layernorm", x, weight, bias, eps))
        return torch.nn.functional.layer_norm(x.float(), (x.shape[1],), weight, bias, eps).to(x.dtype)

    fake(monkeypatch, "quack", softmax=softmax)
    fake(monkeypatch, "quack.rmsnorm", layernorm_fwd=layernorm_fwd)
    (x,), _, out, ref = run_adapter("quack", "softmax", (8, 16))
    assert calls[-1][1] is x and torch.equal(out, ref)

    (x, w, b), fn, out, ref = run_adapter("quack", "layernorm", (8, 16), torch.bfloat16)
    assert calls[-1][1] is x and calls[-1][4] == 1e-5
    assert torch.equal(calls[-1][2], w.float()) and torch.equal(calls[-1][3], b.float())
    assert out.dtype == torch.bfloat16 and torch.allclose(out.float(), ref.float(), atol=2e-2)
    fn(x, w, b)  # the fp32 copies are made once per parameter tensor, not in every call
    assert calls[-1][2] is calls[-2][2] and calls[-1][3] is calls[-2][3]
    w2 = w.clone().mul_(2)
    fn(x, w2, b)
    assert torch.equal(calls[-1][2], w2.float())


def test_quack_needs_hopper(monkeypatch):
    fake(monkeypatch, "quack")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    reason = get_impl("quack").supports(get_case("softmax"), (8, 16), torch.float32, "cuda")
    assert reason == "quack needs compute capability 9.0 or newer"


@pytest.mark.parametrize("impl,module,returns_lse", [
    ("flash-attn", "flash_attn", False), ("flash-attn-4", "flash_attn.cute", True),
])
@pytest.mark.parametrize("causal", [0, 1])
def test_flash_attention_adapters(monkeypatch, impl, module, returns_lse, causal):
    calls = []

    def flash_attn_func(q, k, v, causal=False, softmax_scale=None):
        calls.append((q.shape, k.shape, v.shape, causal, softmax_scale))
        assert q.stride(-1) == 1, "last dimension must be contiguous"
        out = attention_ref(q, k, v, causal)
        return (out, torch.zeros(q.shape[0], q.shape[2], q.shape[1])) if returns_lse else out

    fake(monkeypatch, module, flash_attn_func=flash_attn_func)
    b, h, s, d = 2, 3, 16, 8
    (q, k, v, c), _, out, ref = run_adapter(impl, "attention", (b, h, s, d, causal))
    assert calls == [((b, s, h, d), (b, s, h, d), (b, s, h, d), bool(causal), None)]
    assert out.shape == (b, h, s, d) and torch.allclose(out, ref, atol=1e-5)


def test_flash_attention_limits(monkeypatch):
    fake(monkeypatch, "flash_attn", flash_attn_func=None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    fa = get_impl("flash-attn")
    attn = get_case("attention")
    assert fa.supports(attn, (1, 2, 64, 64, 0), torch.float32, "cuda") == "flash-attn takes fp16 and bf16 only"
    assert fa.supports(attn, (1, 2, 64, 512, 0), torch.float16, "cuda").startswith("flash-attn takes head_dim")
    assert fa.supports(attn, (1, 2, 64, 128, 1), torch.bfloat16, "cuda") is None


@pytest.mark.parametrize("causal", [0, 1])
def test_xformers_adapter(monkeypatch, causal):
    calls = []

    class LowerTriangularMask:
        pass

    def memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None):
        calls.append((query.shape, attn_bias))
        return attention_ref(query, key, value, isinstance(attn_bias, LowerTriangularMask))

    fake(monkeypatch, "xformers.ops", memory_efficient_attention=memory_efficient_attention,
         LowerTriangularMask=LowerTriangularMask)
    (q, k, v, c), _, out, ref = run_adapter("xformers", "attention", (2, 3, 16, 8, causal))
    assert calls[0][0] == (2, 16, 3, 8)
    assert isinstance(calls[0][1], LowerTriangularMask) if causal else calls[0][1] is None
    assert torch.allclose(out, ref, atol=1e-5)
    assert not math.isnan(float(out.sum()))


def test_liger_training_adapters(monkeypatch):
    # rms_norm out of place (the bwd mode reuses the incoming gradient), swiglu and cross-entropy as
    # the library's functional entry points; each differentiated through the library's autograd
    calls = []

    def liger_rms_norm(X, W, eps, offset=0.0, casting_mode="llama", in_place=True):
        calls.append(("rms_norm", X, W, eps, in_place))
        return torch.nn.functional.rms_norm(X, (X.shape[-1],), W, eps)

    def liger_swiglu(a, b):
        calls.append(("swiglu", a, b))
        return torch.nn.functional.silu(a) * b

    def liger_cross_entropy(input, target, *args, **kwargs):
        calls.append(("cross_entropy", input, target, args, kwargs))
        return torch.nn.functional.cross_entropy(input, target)

    fake(monkeypatch, "liger_kernel.transformers.functional", liger_rms_norm=liger_rms_norm,
         liger_swiglu=liger_swiglu, liger_cross_entropy=liger_cross_entropy)
    liger = get_impl("liger")
    assert {c for c in ("rmsnorm", "add_rmsnorm", "swiglu", "cross_entropy") if liger.applies(get_case(c))} == \
        {"rmsnorm", "swiglu", "cross_entropy"}
    (x, w), _, out, ref = run_adapter("liger", "rmsnorm", (8, 16))
    assert calls[-1][1:] == (x, w, 1e-6, False) and torch.allclose(out, ref)
    (a, b), _, out, ref = run_adapter("liger", "swiglu", (8, 16))
    assert calls[-1][1:] == (a, b) and torch.equal(out, ref)
    (logits, t), fn, out, ref = run_adapter("liger", "cross_entropy", (8, 16))
    assert calls[-1][1] is logits and calls[-1][2] is t and not calls[-1][3] and not calls[-1][4]
    assert torch.equal(out, ref)
    from fusebench.runner.mode_call import ModeCall

    leaf = logits.clone().requires_grad_(True)
    (loss, (grad,)) = ModeCall(fn, get_case("cross_entropy"), "fwd_bwd")(leaf, t)
    assert grad.shape == logits.shape and calls[-1][1].requires_grad
