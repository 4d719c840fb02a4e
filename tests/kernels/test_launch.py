"""Launch: the JIT's first call, then the compiled kernel's launcher with the same constants; and
the kernels' launcher caches built on it (one launcher per key, the tuner asked once)."""
import pytest
import torch
import triton
import triton.language as tl

from fusebench import settings
from fusebench.kernels import launch as launch_module
from fusebench.kernels.launch import Launch, signature
from kernel_checks import DEVICE, gpu


@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, n, a, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@pytest.mark.parametrize("n", [1, 100, 1000])
def test_repeated_calls_match_the_reference(n):
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    launch = Launch(_axpy, (triton.cdiv(n, 128),), dict(BLOCK=128, num_warps=4))
    for a in (2.0, -0.5, 3.0):  # new tensors and scalars on every call, as a caller passes them
        out = torch.empty_like(x)
        launch(x, y, out, n, a)
        torch.testing.assert_close(out, a * x + y)
        x, y = y, torch.randn(n, device=DEVICE)


def test_alignment_key():
    t = torch.zeros(8)
    assert signature(t)[-1] and not signature(t[1:])[-1] and signature(None) == (None,)


@gpu
def test_the_second_call_takes_the_compiled_kernel():
    x = torch.randn(1000, device="cuda")
    launch = Launch(_axpy, (8,), dict(BLOCK=128, num_warps=4))
    out = torch.empty_like(x)
    launch(x, x, out, 1000, 1.0)
    assert launch.kernel is not None  # else this Triton's internals differ and every call pays the JIT
    assert not launch_module._hooks_installed()  # else every call takes the JIT path
    assert launch.fast != launch.triton_launch  # else every call pays Triton's launcher (cuda_launch)
    out2 = torch.empty_like(x)
    launch(x, out, out2, 1000, 2.0)
    torch.testing.assert_close(out2, 2 * x + out)


@triton.jit
def _tile_copy(x_desc, out_ptr, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    m = tl.program_id(0) * BLOCK_M
    rows = m + tl.arange(0, BLOCK_M)[:, None]
    tl.store(out_ptr + rows * stride + tl.arange(0, BLOCK_N)[None, :], x_desc.load([m, 0]))


def test_a_descriptor_argument_takes_its_base_tensor():
    # (64, 32) views of rows of 48: the descriptor's geometry, fixed with the Launch
    launch = Launch(_tile_copy, (4,), dict(BLOCK_M=16, BLOCK_N=32, num_warps=4),
                    descriptors={0: ([64, 32], [48, 1], [16, 32])})
    for _ in range(3):  # a new base tensor each call
        x = torch.randn(64, 48, device=DEVICE)[:, :32]
        out = torch.zeros(64, 32, device=DEVICE)
        launch(x, out, 32)
        torch.testing.assert_close(out, x)
    if DEVICE == "cuda":  # a TMA kernel takes the direct launch too, its maps encoded per address
        assert launch.fast != launch.triton_launch


def test_an_empty_hook_chain_is_no_hook():
    class Chain:
        def __init__(self, calls):
            self.calls = calls

    assert not launch_module._hook_set(None) and not launch_module._hook_set(Chain([]))
    assert launch_module._hook_set(Chain([print])) and launch_module._hook_set(print)


# ----------------------------------------------------------------------------------------------
# the kernels' launcher caches: a key's plan, grid and constants decided once


import fusebench.kernels.horizontal as khor  # noqa: E402
import fusebench.kernels.norms as knorm  # noqa: E402
import fusebench.kernels.pointwise as kpw  # noqa: E402
import fusebench.kernels.softmax as ksm  # noqa: E402
from fusebench.kernels import exchange, launch, launch_plans, rowwise, tuning  # noqa: E402
from kernel_checks import ALL, IMPL, check, fresh_launchers, inputs, strided  # noqa: E402


@pytest.fixture
def spies(monkeypatch):
    """Names of the tuner and candidate functions called, in order (each still does its work)."""
    called = []

    def spy(module, name):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, **k: (called.append(name), real(*a, **k))[1])

    spy(tuning, "autotune")  # the row-wise kernels'
    for module in (kpw, khor):
        spy(module, "autotune")
    spy(launch_plans, "row_plans")  # every row-wise op's candidates
    spy(khor, "row_plans")
    spy(kpw, "tile_2d_plans")  # element_wise_plans'
    spy(kpw, "num_sms")  # element_wise_plans' and transposed_plans'
    return called


@pytest.mark.parametrize("name", ALL)
def test_second_call_asks_neither_tuner_nor_candidates(name, spies):
    caches = fresh_launchers()
    args = inputs(name, (5, 300), torch.float32, seed=1)
    check(name, IMPL[name](*args), args)
    assert "autotune" in spies and len(spies) > 1  # a new key: candidates listed, the tuner asked
    assert sum(map(len, caches)) == 1
    spies.clear()
    args = inputs(name, (5, 300), torch.float32, seed=2)  # new tensors, the same key
    check(name, IMPL[name](*args), args)
    assert spies == [] and sum(map(len, caches)) == 1


@pytest.mark.parametrize("layout", ["row_stride", "offset4", "fp16", "max_onchip"])
def test_another_key_gets_its_own_launcher(layout, spies):
    caches = fresh_launchers()
    (x,) = inputs("softmax", (5, 300), torch.float32, seed=3)
    check("softmax", ksm.softmax_impl(x), (x,))
    first = next(iter(caches[0].values()))
    if layout == "row_stride":
        y = strided(inputs("softmax", (5, 300), torch.float32, seed=4)[0], "rows")
    elif layout == "offset4":  # same shape and strides, 4 bytes past a 16-byte boundary
        y = torch.randn(5 * 300 + 4, device=x.device)[1:1 + 5 * 300].view(5, 300)
        assert launch.signature(x)[-1] and not launch.signature(y)[-1]
    else:
        y = inputs("softmax", (5, 300), torch.float16 if layout == "fp16" else torch.float32, seed=4)[0]
    spies.clear()
    out, plan = ksm.softmax_run(y, max_onchip=64) if layout == "max_onchip" else ksm.softmax_run(y)
    check("softmax", out, (y,))
    assert "autotune" in spies and len(caches[0]) == 2 and next(reversed(caches[0].values())) is not first
    if layout == "max_onchip":
        # part of the key: below N the candidates are looped rows and one-row tiles of many warps;
        # the heuristic's, which the CPU keeps untimed, is a looped one
        assert plan.mode == "loop" or (plan.mode == "tile" and plan.block_m == 1)
        assert plan.mode == "loop" or DEVICE == "cuda"
    else:
        assert plan.mode == "tile"
    spies.clear()
    again = ksm.softmax_run(y, max_onchip=64) if layout == "max_onchip" else ksm.softmax_run(y)
    check("softmax", again[0], (y,))
    assert spies == [] and again[1] == plan


def test_a_forced_plan_is_part_of_the_key(spies):
    caches = fresh_launchers()
    args = inputs("layernorm", (3, 700), torch.float32, seed=5)
    forced = launch_plans.loop_plan(64, 4)
    for _ in range(2):
        out, plan = rowwise.call(knorm.LAYERNORM, args[:1], args[1:], lambda: [], forced, "")
        check("layernorm", out, args)
        assert plan == forced
    assert "autotune" not in spies and len(caches[0]) == 1
    out, plan = ksm.softmax_run(args[0])
    assert plan != forced and len(caches[0]) == 2


@pytest.mark.interpreter
def test_cooperative_launcher_keeps_its_exchange_buffer():
    # one program per row (the interpreter runs programs one after another), two rounds a launch:
    # each call moves the epoch of the buffer its launcher holds past two tags
    caches = fresh_launchers()
    plan = launch_plans.RowPlan("coop", 1, 1024, 4, splits=1, grid=2)
    sync = exchange.exchange_buffer(DEVICE, 2)
    for seed in (1, 2):
        epoch = int(sync[0])
        (x,) = inputs("softmax", (3, 700), torch.float32, seed=seed)
        check("softmax", ksm.softmax_impl(x, plan=plan), (x,))
        assert (int(sync[0]), int(sync[1])) == (epoch + 3, 0)
    (launcher,) = caches[0].values()
    assert launcher.rest[0] is sync and launcher.rest[1] == sync.numel()


def test_a_choice_that_is_not_final_is_not_kept(monkeypatch, spies):
    # on a GPU while tuning is off or a graph is captured, the tuner's untimed first candidate
    # must not outlive the call
    caches = fresh_launchers()
    monkeypatch.setattr(rowwise, "is_final", lambda *a: False)
    (x,) = inputs("softmax", (5, 300), torch.float32, seed=6)
    for _ in range(2):
        spies.clear()
        check("softmax", ksm.softmax_impl(x), (x,))
        assert "autotune" in spies
    assert len(caches[0]) == 0


def test_is_final(monkeypatch):
    tuner = tuning.Tuner()
    assert launch.is_final(tuner, "k", "cpu", 5)
    monkeypatch.setattr(launch.dev, "is_interpreter", lambda: False)
    assert not launch.is_final(tuner, "k", "cuda", 5)  # the tuner did not keep a choice
    assert launch.is_final(tuner, "k", "cuda", 1)
    tuner.choices["k"] = "plan"
    assert launch.is_final(tuner, "k", "cuda", 5)


def test_bad_operands_are_refused_and_nothing_kept():
    caches = fresh_launchers()
    x, w, b = inputs("layernorm", (3, 70), torch.float32)
    with pytest.raises(ValueError, match=r"shape \(70,\)"):
        IMPL["layernorm"](x, w[:60], b)
    dy, y = inputs("softmax_backward", (3, 70), torch.float32)
    with pytest.raises(ValueError, match="differ in shape"):
        IMPL["softmax_backward"](dy, y[:2])
    with pytest.raises(ValueError, match="2-D"):
        IMPL["softmax"](x[None])
    with pytest.raises(ValueError, match="bias must have shape"):
        IMPL["bias_gelu"](x, w[:3])
    assert sum(map(len, caches)) == 0


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", ALL)
def test_gpu_second_call_takes_the_compiled_kernel(name, dtype):
    caches = fresh_launchers()
    for seed in (1, 2):  # fresh tensors each call; the second goes through the kept launcher
        args = inputs(name, (300, 1000), dtype, seed=seed)
        check(name, IMPL[name](*args), args)
        (launcher,) = [found for cache in caches for found in cache.values()]
        assert launcher.launch.kernel is not None  # else every call pays Triton's JIT
        assert launcher.launch.fast != launcher.launch.triton_launch  # else it pays Triton's launcher


def test_a_one_off_launch_keeps_nothing():
    x = torch.randn(100, device=DEVICE)
    launch = Launch(_axpy, (1,), dict(BLOCK=128, num_warps=4))
    out = torch.empty_like(x)
    launch.jit(x, x, out, 100, 2.0)
    torch.testing.assert_close(out, 3 * x)
    assert launch.kernel is None and launch.run is None


# ----------------------------------------------------------------------------------------------
# a repeated call's work: the lookup, its outputs' allocations and its launches, nothing else


import fusebench.kernels.cross_entropy as kce  # noqa: E402
import fusebench.kernels.matmul as kmm  # noqa: E402
import fusebench.kernels.rmsnorm as krms  # noqa: E402
import fusebench.kernels.swiglu as kswiglu  # noqa: E402
from fusebench.cases.base import get_case  # noqa: E402
from fusebench.kernels import KERNELS  # noqa: E402

_ALLOCATORS = {torch: ("empty", "empty_like", "empty_strided", "zeros", "zeros_like"),
               torch.Tensor: ("new_empty_strided", "new_empty", "new_zeros", "contiguous", "clone")}

# case -> (CPU shape, allocations, launches) of a call whose key was met before
_REPEATED = {
    "softmax": ((5, 300), 1, 1),
    "softmax_backward": ((5, 300), 1, 1),
    "layernorm": ((5, 300), 1, 1),
    "rmsnorm": ((5, 300), 1, 1),
    "add_rmsnorm": ((5, 300), 2, 1),  # h and the output, one launch writing both
    "horizontal_reduction_pointwise": ((5, 300), 2, 1),
    "swiglu": ((5, 300), 1, 1),
    "cross_entropy": ((5, 300), 1, 1),  # the per-row losses (their mean is torch's)
    "matmul_add": ((32, 16, 24), 1, 1),
    "conv_add": ((2, 8, 6, 6, 8, 3, 1, 0), 0, 1),  # the conv's output is torch's (cuDNN), the epilogue in place
    "conv_relu": ((2, 8, 6, 6, 8, 1, 1, 0), 0, 1),
    "conv_bn": ((2, 8, 6, 6, 8, 3, 1, 0), 0, 1),  # BN applied in cuDNN's output: the bn-epilogue way
}


@pytest.mark.interpreter
@pytest.mark.parametrize("name", sorted(_REPEATED))
def test_a_repeated_call_only_allocates_its_outputs_and_launches(name, monkeypatch):
    # Launches recorded, not run (the interpreter allocates copies of its own): the count of
    # allocations from Python and of launches per call, and no tuner, for a key met before.
    shape, allocations, launches = _REPEATED[name]
    if name == "conv_bn":
        monkeypatch.setenv("FUSEBENCH_CONV_BN", "bn-epilogue")
        settings.refresh()
    events = []
    monkeypatch.setattr(Launch, "__call__", lambda self, *args: events.append("launch"))
    monkeypatch.setattr(Launch, "jit", lambda self, *args: None)
    args = get_case(name).make_inputs(shape, torch.float32, "cpu", 0)
    fn = KERNELS[name].fn
    fn(*args)  # the key's first call: checks, the tuner, the launcher

    def spy(owner, attr):
        real = getattr(owner, attr)
        monkeypatch.setattr(owner, attr, lambda *a, **k: (events.append(attr), real(*a, **k))[1])

    for owner, names in _ALLOCATORS.items():
        for attr in names:
            spy(owner, attr)
    spy(tuning.Tuner, "autotune")
    spy(triton.runtime.Autotuner, "run")
    spy(launch_plans, "row_plans")
    args = get_case(name).make_inputs(shape, torch.float32, "cpu", 1)  # new tensors, the same key
    events.clear()
    fn(*args)
    allocated = [e for e in events if e != "launch"]
    assert len(allocated) == allocations and set(allocated) <= {"new_empty_strided"}, events
    assert events.count("launch") == launches, events


@pytest.mark.interpreter
def test_swiglu_and_cross_entropy_keep_one_launcher_per_key():
    kswiglu._CACHE.clear()
    kce._CACHE.clear()
    a, b = torch.randn(3, 50), torch.randn(3, 50)
    torch.testing.assert_close(kswiglu.swiglu_forward(a, b), torch.nn.functional.silu(a) * b)
    torch.testing.assert_close(kswiglu.swiglu_forward(a.t(), b.t()), torch.nn.functional.silu(a.t()) * b.t())
    assert len(kswiglu._CACHE) == 2  # (the transposed operands' contiguous copies: a key of their own)
    with pytest.raises(ValueError, match="differ"):
        kswiglu.swiglu_forward(a, b[:2])
    logits, targets = torch.randn(4, 70), torch.randint(0, 70, (4,))
    for _ in range(2):
        loss, lse, x, t = kce.cross_entropy_forward(logits, targets, with_lse=True)
        torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(logits, targets))
        grad = kce.cross_entropy_backward(x, t, lse, torch.tensor(1.0))
        torch.testing.assert_close(grad, torch.softmax(logits, 1).sub(torch.nn.functional.one_hot(targets, 70)) / 4)
    assert len(kce._CACHE) == 2  # the forward's launcher and the backward's
    with pytest.raises(ValueError, match="targets"):
        kce.cross_entropy_forward(logits, targets[:3])


@pytest.mark.interpreter
def test_add_rmsnorm_writes_h_through_its_own_allocation():
    fresh_launchers()
    x, residual, w = get_case("add_rmsnorm").make_inputs((5, 300), torch.float32, "cpu", 0)
    for _ in range(2):
        (h, y), plan = krms.add_rmsnorm_run(x, residual, w)
        torch.testing.assert_close(h, x + residual)
        torch.testing.assert_close(y, torch.nn.functional.rms_norm(h, (300,), w, krms.RMSNORM_EPS))
    assert plan.mode == "tile"
    with pytest.raises(ValueError, match="differ in dtype"):
        krms.add_rmsnorm_run(x, residual.double(), w)
    with pytest.raises(ValueError, match=r"shape \(300,\)"):
        krms.add_rmsnorm_run(x, residual, w[:10])
    with pytest.raises(ValueError, match=r"shape \(300,\)"):
        krms.rmsnorm_run(x, x)  # a row-sized weight is refused


@pytest.mark.interpreter
def test_rmsnorm_max_onchip_is_part_of_the_key():
    caches = fresh_launchers()
    x, w = get_case("rmsnorm").make_inputs((3, 300), torch.float32, "cpu", 0)
    assert krms.rmsnorm_run(x, w)[1].mode == "tile"
    assert krms.rmsnorm_run(x, w, max_onchip=64)[1].mode == "loop" and sum(map(len, caches)) == 2


def test_tma_plan_passes_each_call_s_own_tensors(monkeypatch):
    # each call's launch gets that call's tensors in the descriptors' places, with their geometry
    # fixed in the Launch, and the plan keeps none of them
    seen = []
    monkeypatch.setattr(Launch, "__call__", lambda self, *args: seen.append((self.descriptors, args[:3])))
    monkeypatch.setattr(triton.runtime.Autotuner, "run", lambda self, *a, **k: setattr(
        self, "best_config", self.configs[0]))
    from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401  (Triton >= 3.4)
    a, b = torch.randn(64, 32), torch.randn(48, 32).t()  # b transposed: its descriptor is of the (48, 32) matrix
    c = torch.empty(64, 48)
    plan = kmm._tma_plan(a, b, c, None, None, False, ((64, 48), (48, 1)))
    a2 = torch.randn(64, 32)
    out = plan(a2, b, None, None, None)
    geometry, tensors = seen[-1]
    assert tensors[0] is a2 and tensors[1] is b and tensors[2] is out
    assert [geometry[i][:2] for i in range(3)] == [([64, 32], [32, 1]), ([48, 32], [32, 1]), ([64, 48], [48, 1])]
    kept = [x.cell_contents for x in plan.__closure__]
    assert not any(isinstance(x, TensorDescriptor) or x is a2 or x is out for x in kept)


def test_dependent_launch_options(monkeypatch):
    # a kernel's WAIT constexpr and Triton's launch_pdl go together, and only where the device can
    assert launch_module.dependent("cpu") == {"WAIT": False}
    monkeypatch.setattr(launch_module.dev, "dependent_launch", lambda device: True)
    assert launch_module.dependent("cuda") == {"WAIT": True, "launch_pdl": True}
    assert launch_module.dependent("cuda", on=False) == {"WAIT": False}
