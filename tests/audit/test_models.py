"""The model catalog of the audit: the built-in models, the registry, `fusebench.model` and plugins."""
import importlib.util
import os
import textwrap

import pytest
import torch

import fusebench
from fusebench.audit import models as M
from fusebench.audit.zoo import layers, libraries
from fusebench.cases import load_plugin
from fusebench.cases.base import PluginError, UnknownName

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "my_model.py")

# Output shapes at each built-in's CPU sizes.
CPU_OUTPUTS = {
    "llama": (1, 32, 256),
    "gpt2": (1, 64, 768),
    "vit": (1, 197, 768),
    "resnet50_stage": (2, 512, 8, 8),
    "lm_head_ce": (),
}
# At the GPU defaults: output shape and parameter count (known figures of the layers they copy:
# a Llama-3-8B layer has 218,112,000 parameters, ResNet-50's conv3_x 1,219,584).
GPU_OUTPUTS = {
    "llama": ((1, 2048, 4096), 218_112_000),
    "gpt2": ((8, 1024, 768), 7_087_872 + 1024 * 768),
    "vit": ((64, 197, 768), 7_087_872),
    "resnet50_stage": ((32, 512, 28, 28), 1_219_584),
    "lm_head_ce": ((), 128256 * 4096 + 4096),
}


@pytest.fixture(autouse=True)
def _forget_user_models():
    yield
    M._reset_user_models()


def _step(built):
    """The forward and a backward (the model's loss, or a random gradient of the output)."""
    out = built.module(*built.inputs)
    if built.loss is not None:
        built.loss(out).backward()
    else:
        out.backward(torch.randn_like(out))
    return out


def test_the_builtins_are_registered_in_order():
    assert [s.name for s in M.all_models()] == list(CPU_OUTPUTS)
    for spec in M.all_models():
        assert spec.builtin and spec.plugin is None and spec.description


@pytest.mark.parametrize("name", list(CPU_OUTPUTS))
def test_builtin_builds_at_cpu_sizes_and_runs_forward_and_backward(name):
    spec = M.get_model(name)
    built = M.build(spec)
    assert built.sizes == spec.default_sizes("cpu") and built.dtype == torch.float32
    assert built.source in ("fusebench", spec.library) and built.source in M.SOURCES
    assert (built.note is None) == (built.source != "fusebench" or spec.library is None)
    assert built.module.training
    out = _step(built)
    assert tuple(out.shape) == CPU_OUTPUTS[name]
    assert torch.isfinite(out).all()
    for pname, p in built.module.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
    assert built.inputs[0].requires_grad and built.inputs[0].grad is not None


@pytest.mark.parametrize("name", list(GPU_OUTPUTS))
def test_builtin_at_gpu_defaults_has_the_layer_shapes(name):
    # Built on the meta device: shapes and parameters without the memory or the arithmetic.
    spec = M.get_model(name)
    built = M.build(spec, device="meta")
    assert built.dtype == torch.bfloat16 and built.sizes == spec.sizes
    shape, params = GPU_OUTPUTS[name]
    assert tuple(built.module(*built.inputs).shape) == shape
    assert sum(p.numel() for p in built.module.parameters()) == params


def test_llama_configuration():
    s = layers.llama_shape(4096)
    assert (s.heads, s.kv_heads, s.head_dim, s.intermediate, s.eps, s.rope_theta) == (32, 8, 128, 14336, 1e-5, 500000.0)
    s = layers.llama_shape(256)
    assert (s.heads, s.kv_heads, s.head_dim, s.intermediate) == (4, 2, 64, 896)
    built = M.build("llama", library=False)
    attn = built.module.layer.self_attn
    assert attn.k_proj.weight.shape == (2 * 64, 256) and attn.q_proj.weight.shape == (4 * 64, 256)
    x, cos, sin = built.inputs
    assert cos.shape == sin.shape == (1, 32, 64) and not cos.requires_grad and not sin.requires_grad
    assert x.requires_grad


def test_llama_attention_is_causal():
    # Changing the last token changes no earlier position's output.
    built = M.build("llama", library=False)
    x, cos, sin = (t.detach() for t in built.inputs)
    y = x.clone()
    y[:, -1] += 1.0
    with torch.no_grad():
        a, b = built.module(x, cos, sin), built.module(y, cos, sin)
    assert torch.equal(a[:, :-1], b[:, :-1]) and not torch.equal(a[:, -1], b[:, -1])


def test_lm_head_returns_the_cross_entropy_of_its_labels():
    built = M.build("lm_head_ce")
    x, labels = built.inputs
    assert labels.dtype == torch.int64 and labels.shape == (1, 32) and int(labels.max()) < 4096
    with torch.no_grad():
        m = built.module
        logits = m.lm_head(m.norm(x)).double()
        expected = torch.nn.functional.cross_entropy(logits.view(-1, 4096), labels.view(-1))
        assert torch.allclose(m(x, labels).double(), expected, rtol=1e-5)
    assert built.loss is M.output_is_loss


@pytest.mark.parametrize("name", list(CPU_OUTPUTS))
def test_builds_are_reproducible_from_the_seed(name):
    a, b, c = M.build(name, seed=3), M.build(name, seed=3), M.build(name, seed=4)

    def same(x, y):
        return all(torch.equal(p, q) for p, q in zip(x.module.state_dict().values(), y.module.state_dict().values())) \
            and all(torch.equal(p, q) for p, q in zip(x.inputs, y.inputs))

    assert same(a, b) and not same(a, c)
    # not one tensor is left as it was: every weight and every random input is drawn from the seed
    drawn = [k for k, v in a.module.state_dict().items() if v.is_floating_point() and v.numel() > 1 and v.std() > 0]
    assert drawn and all(not torch.equal(a.module.state_dict()[k], c.module.state_dict()[k]) for k in drawn)
    assert not torch.equal(a.inputs[0], c.inputs[0])


def test_a_build_leaves_the_callers_random_state_alone():
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    M.build("gpt2")
    assert torch.equal(torch.rand(3), expected)


def test_sizes_default_per_device_and_override():
    spec = M.get_model("llama")
    assert spec.default_sizes("cuda") == {"batch": 1, "tokens": 2048, "hidden": 4096}
    assert spec.default_sizes("cpu") == {"batch": 1, "tokens": 32, "hidden": 256}
    assert spec.dtype_for("cuda") == torch.bfloat16 and spec.dtype_for("cpu") == torch.float32
    built = M.build(spec, {"tokens": 16}, "fp32")
    assert built.sizes == {"batch": 1, "tokens": 16, "hidden": 256}
    assert built.inputs[0].shape == (1, 16, 256)


@pytest.mark.parametrize("sizes, words", [
    ({"tokenz": 8}, ["no size 'tokenz'", "did you mean tokens", "batch, tokens, hidden"]),
    ({"batch": 0}, ["batch", "positive"]),
    ({"tokens": -3}, ["tokens", "positive"]),
    ({"batch": 1.5}, ["batch", "positive"]),
    ({"batch": True}, ["batch", "positive"]),
    ({"hidden": 100}, ["hidden must be a multiple of 64"]),
])
def test_bad_sizes_are_one_line_value_errors(sizes, words):
    with pytest.raises(ValueError) as info:
        M.build("llama", sizes)
    message = str(info.value)
    assert "\n" not in message and not isinstance(info.value, M.ModelError)
    for w in words:
        assert w in message


def test_a_flag_size_is_0_or_1():
    with pytest.raises(ValueError, match="channels_last of model resnet50_stage must be 0 or 1"):
        M.build("resnet50_stage", {"channels_last": 2})


def test_unknown_model_is_an_unknown_name_with_a_suggestion():
    with pytest.raises(UnknownName, match=r"unknown model 'lama' \(did you mean llama\?\)"):
        M.get_model("lama")
    with pytest.raises(UnknownName):
        M.build("no-such-model")


def test_channels_last_switches_the_memory_format_and_not_the_values():
    sizes = {"batch": 1, "resolution": 8}
    nchw = M.build("resnet50_stage", {**sizes, "channels_last": 0}, seed=1)
    nhwc = M.build("resnet50_stage", {**sizes, "channels_last": 1}, seed=1)
    cl = torch.channels_last
    x = nhwc.inputs[0]
    assert x.is_contiguous(memory_format=cl) and not nchw.inputs[0].is_contiguous(memory_format=cl)
    assert x.requires_grad and x.is_leaf
    convs = [m for m in nhwc.module.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 13 and all(c.weight.is_contiguous(memory_format=cl) for c in convs)
    a, b = nchw.module(*nchw.inputs), nhwc.module(*nhwc.inputs)
    assert b.is_contiguous(memory_format=cl)
    assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_resnet_stage_is_conv3_x_with_a_projection_shortcut():
    stage = M.build("resnet50_stage", library=False).module
    assert len(stage) == 4
    first = stage[0]
    assert first.conv1.in_channels == 256 and first.conv3.out_channels == 512 and first.conv2.stride == (2, 2)
    assert first.downsample[0].stride == (2, 2) and all(b.downsample is None for b in stage[1:])
    assert all(isinstance(m, torch.nn.BatchNorm2d) and m.training for m in stage.modules()
               if isinstance(m, torch.nn.BatchNorm2d))


# ---------------------------------------------------------------------------------------------
# A user's model: the decorator and plugin files.


def _write(tmp_path, text, name="user_model.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


USER_MODEL = """
    import torch
    import fusebench

    @fusebench.model(sizes={"batch": 4, "width": 32}, cpu_sizes={"batch": 2}, description="two linears")
    def tiny_mlp(batch, width, *, dtype, device, seed):
        m = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.Linear(2 * width, width))
        x = torch.randn(batch, width)
        return m.to(device=device, dtype=dtype), (x.to(device=device, dtype=dtype),)
"""


def test_a_plugin_file_registers_its_model_with_its_path(tmp_path):
    path = _write(tmp_path, USER_MODEL)
    load_plugin(path)
    spec = M.get_model("tiny_mlp")
    assert spec.plugin == path and spec.source == "user" and not spec.builtin
    assert spec.description == "two linears" and M.plugin_models(path) == ["tiny_mlp"]
    assert spec.default_sizes("cpu") == {"batch": 2, "width": 32}
    built = M.build("tiny_mlp")
    assert built.source == "user" and built.note is None and built.loss is None
    assert _step(built).shape == (2, 32)
    # the same weights from the same seed, though the function never seeds anything itself
    again = M.build("tiny_mlp")
    assert torch.equal(built.module[0].weight, again.module[0].weight)
    load_plugin(path)  # a file loaded again replaces its own model
    assert M.plugin_models(path) == ["tiny_mlp"]
    M._reset_user_models()
    with pytest.raises(UnknownName):
        M.get_model("tiny_mlp")
    assert M.get_model("llama").builtin


def test_a_user_model_cannot_take_a_builtin_name(tmp_path):
    path = _write(tmp_path, USER_MODEL.replace("def tiny_mlp", "def llama"))
    with pytest.raises(PluginError, match="'llama' is a built-in model; give yours another name"):
        load_plugin(path)
    assert M.get_model("llama").builtin


def test_a_model_function_that_raises_is_a_model_error():
    @fusebench.model(sizes={"batch": 2})
    def broken(batch, *, dtype, device, seed):
        raise RuntimeError("weights file missing\nsecond line")

    with pytest.raises(M.ModelError) as info:
        M.build("broken")
    assert str(info.value) == "model broken failed to build: RuntimeError: weights file missing"
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("result, words", [
    ("None", "returned NoneType; expected (module, inputs)"),
    ("(lambda x: x, (torch.ones(1),))", "expected a torch.nn.Module"),
    ("(torch.nn.Linear(2, 2), (torch.ones(1, 2, device='meta'),))", "put input 0 on meta; it was built for cpu"),
])
def test_a_model_function_returning_something_else_is_a_model_error(result, words):
    ns = {}
    exec(textwrap.dedent(f"""
        import torch, fusebench
        @fusebench.model(sizes={{"batch": 2}})
        def odd(batch, *, dtype, device, seed):
            return {result}
    """), ns)
    with pytest.raises(M.ModelError, match=words.replace("(", r"\(").replace(")", r"\)")):
        M.build("odd")


def test_a_single_input_may_be_returned_bare():
    @fusebench.model(sizes={"batch": 2})
    def bare(batch, *, dtype, device, seed):
        return torch.nn.Linear(3, 3), torch.ones(batch, 3)

    assert len(M.build("bare").inputs) == 1


@pytest.mark.parametrize("kwargs, fn_args, words", [
    ({"sizes": {"batch": 0}}, "batch", "size batch=0 is not a valid size"),
    ({"sizes": {"batch": 2}, "cpu_sizes": {"tokens": 8}}, "batch", "cpu_sizes names tokens"),
    ({"sizes": {"batch": 2, "tokens": 8}}, "batch", "must take tokens as keyword arguments"),
])
def test_a_bad_declaration_is_a_value_error(kwargs, fn_args, words):
    ns = {}
    exec(f"def f({fn_args}, *, dtype, device, seed):\n    pass\n", ns)
    with pytest.raises(ValueError, match=words):
        fusebench.model(**kwargs)(ns["f"])


def test_a_user_model_has_no_library_definition():
    @fusebench.model(sizes={"batch": 2})
    def plain_user(batch, *, dtype, device, seed):
        return torch.nn.Linear(3, 3), (torch.ones(batch, 3),)

    with pytest.raises(ValueError, match="has no library definition"):
        M.build("plain_user", library=True)


def test_the_example_model_file_runs(tmp_path):
    load_plugin(EXAMPLE)
    spec = M.get_model("my_block")
    assert spec.plugin == os.path.abspath(EXAMPLE) and spec.sizes == {"batch": 8, "tokens": 512, "hidden": 1024}
    built = M.build(spec)
    assert _step(built).shape == (1, 64, 256) and built.inputs[0].grad is not None


# ---------------------------------------------------------------------------------------------
# The library modules: used when importable, configured as fusebench's own definitions.


def test_a_library_that_cannot_be_imported_falls_back_with_a_note(monkeypatch):
    def missing(library, load):
        raise libraries.LibraryMissing(f"{library} is not installed")

    monkeypatch.setattr(libraries, "_load", missing)
    built = M.build("vit")
    assert built.source == "fusebench" and built.note == "timm is not installed"
    assert M.build("vit", library=False).note is None
    with pytest.raises(M.ModelError) as info:
        M.build("vit", library=True)
    assert str(info.value) == "model vit: timm is not installed; install it with pip install 'fusebench[models]'"


def test_a_broken_library_install_is_named():
    def load():
        raise RuntimeError("operator torchvision::nms does not exist")

    with pytest.raises(libraries.LibraryMissing, match=r"torchvision cannot be imported here \(RuntimeError: op"):
        libraries._load("torchvision", load)

    def load():
        import fusebench_no_such_library  # noqa: F401

    with pytest.raises(libraries.LibraryMissing, match="cannot be imported here"):
        libraries._load("torchvision", load)


def _importable(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ValueError:
        return False


def _gpt2_from_plain(state):
    # transformers' GPT-2 keeps its projections as Conv1D: (in, out), the transpose of nn.Linear's.
    return {k: v.t() if k.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")) else v
            for k, v in state.items()}


@pytest.mark.parametrize("name, library", [
    ("llama", "transformers"), ("gpt2", "transformers"), ("vit", "timm"), ("resnet50_stage", "torchvision"),
])
def test_the_library_module_computes_what_the_plain_definition_does(name, library):
    if not _importable(library):
        pytest.skip(f"{library} is not installed")
    lib = M.build(name, library=True)
    plain = M.build(name, library=False)
    assert lib.source == library and plain.source == "fusebench"
    state = plain.module.state_dict()
    lib.module.load_state_dict(_gpt2_from_plain(state) if name == "gpt2" else state, strict=False)
    missing = set(lib.module.state_dict()) ^ set(state)
    assert not [k for k in missing if not k.endswith(("attn.bias", "attn.masked_bias"))], missing
    a = plain.module(*plain.inputs)
    b = lib.module(*plain.inputs)
    assert a.shape == b.shape
    assert torch.allclose(a, b, atol=1e-5, rtol=1e-4), (a - b).abs().max()
    _step(lib)


# ---------------------------------------------------------------------------------------------
# The compiler on the CPU.


@pytest.mark.slow
def test_inductor_compiles_the_llama_layer_forward_and_backward():
    eager = M.build("llama", library=False)
    compiled = M.build("llama", library=False)
    fn = torch.compile(compiled.module)
    out = fn(*compiled.inputs)
    grad = torch.randn_like(out)
    out.backward(grad)
    ref = eager.module(*eager.inputs)
    ref.backward(grad)
    assert torch.allclose(out, ref, atol=1e-4, rtol=1e-3)
    assert torch.allclose(compiled.inputs[0].grad, eager.inputs[0].grad, atol=1e-4, rtol=1e-3)
    for (name, p), q in zip(compiled.module.named_parameters(), eager.module.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-4, rtol=1e-3), name
