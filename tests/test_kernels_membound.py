"""Correctness of fusebench's memory-bound Triton kernels (pointwise, softmax, norms, horizontal).

Without a GPU the kernels run under Triton's interpreter (TRITON_INTERPRET=1, set here before the
kernel modules are imported, and the modules re-imported if something imported them earlier
without it), at small odd shapes, in fp32 and fp16, plus bf16 at one shape (the kernels upcast
to fp32 right after loading, so no bf16 arithmetic reaches the interpreter).  Every launch plan
is exercised: rows on chip, looped long rows and split rows (forced at small sizes through the
wrappers' `plan` argument), with non-contiguous row strides and transposed views.  With a GPU the
same tests run on it, and `gpu`-marked tests add bf16 and sizes where the heuristics pick the
long-row plans themselves.  Outputs are compared with the case's float64 reference under the
case's tolerance: |out - ref| <= atol * max|ref| + rtol * |ref|.
"""
import dataclasses
import os

import pytest
import torch

from fusebench.cases.base import get_case
from fusebench.kernels import KERNELS, utils
import fusebench.kernels.horizontal as khor
import fusebench.kernels.norms as knorm
import fusebench.kernels.pointwise as kpw
import fusebench.kernels.softmax as ksm

# tests/conftest.py sets TRITON_INTERPRET=1 before anything imports a kernel when there is no GPU.
ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")

DEVICE = "cuda" if ON_GPU else "cpu"
gpu = pytest.mark.gpu

# The interpreter evaluates padding lanes too (exp(-inf - -inf) and the like): harmless NaNs
# in masked-off lanes make numpy warn.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

ELEMENTWISE = ["pointwise_chain", "bias_gelu", "bias_dropout_add", "bias_dropout_add_transposed"]
ROWWISE = ["softmax", "double_softmax", "softmax_backward", "layernorm", "norm_chain",
           "horizontal_reduction_pointwise", "horizontal_reduction_reduction"]
ALL = ELEMENTWISE + ROWWISE

# The wrappers with a `plan` argument, same positional inputs as the case.
IMPL = {
    "softmax": ksm.softmax_impl,
    "double_softmax": ksm.double_softmax_impl,
    "softmax_backward": ksm.softmax_backward_impl,
    "layernorm": knorm.layernorm_impl,
    "norm_chain": knorm.norm_chain_impl,
    "horizontal_reduction_pointwise": khor.horizontal_reduction_pointwise_impl,
    "horizontal_reduction_reduction": khor.horizontal_reduction_reduction_impl,
    "pointwise_chain": kpw.pointwise_chain_impl,
    "bias_gelu": kpw.bias_gelu_impl,
    "bias_dropout_add": kpw.bias_dropout_add_impl,
    "bias_dropout_add_transposed": kpw.bias_dropout_add_transposed_impl,
}


def check(case_name, out, args):
    case = get_case(case_name)
    dtype = args[0].dtype
    ref = case.run_reference(args)
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    assert len(outs) == len(refs)
    atol, rtol = case.tolerance(dtype)
    for o, r in zip(outs, refs):
        assert o.shape == r.shape, (o.shape, r.shape)
        assert o.dtype == dtype, (o.dtype, dtype)
        o64, r = o.double().cpu(), r.cpu()
        assert torch.isfinite(o64).all(), "NaN or inf in the output"
        err = (o64 - r).abs()
        bad = err > atol * r.abs().max() + rtol * r.abs()
        assert not bad.any(), (f"{case_name}: {int(bad.sum())} of {bad.numel()} elements out of tolerance, "
                               f"max err {err.max().item():.3e}")


def inputs(case_name, shape, dtype, seed=0):
    return get_case(case_name).make_inputs(shape, dtype, DEVICE, seed)


def strided(t: torch.Tensor, how: str) -> torch.Tensor:
    """The same values in a non-contiguous layout: `rows` pads every row (row stride > N),
    `cols` stores the tensor column-major (column stride > 1, row stride 1)."""
    if t.dim() != 2:
        return t
    if how == "rows":
        wide = torch.full((t.shape[0], t.shape[1] + 13), float("nan"), dtype=t.dtype, device=t.device)
        wide[:, : t.shape[1]] = t
        return wide[:, : t.shape[1]]
    return t.t().contiguous().t()


# ----------------------------------------------------------------------------------------------
# the registered wrappers (the case's exact signature), heuristic plans


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


# ----------------------------------------------------------------------------------------------
# long rows: looped and split plans, forced at small sizes


LONG_PLANS = {
    "loop": utils.loop_plan(64, 4),
    "loop_capped": utils.loop_plan(64, 4, grid=2),  # fewer programs than rows: each takes several
    "loop_pipelined": utils.loop_plan(64, 4, grid=2, stages=3),  # tl.range(num_stages=3) passes
    "loop_prefetched": utils.loop_plan(64, 4, grid=2, stages=1),  # next step's loads issued early, in registers
    "loop_one_step": utils.loop_plan(1024, 4),  # each pass one (masked) step over the whole row
    "split": utils.split_plan(700, 64),  # 11 programs per row, the last one ragged
}
# the horizontal kernels also stream several rows side by side in their looped plans
HORIZONTAL_LOOPS = {
    "loop_rows": utils.loop_plan(64, 4, rows=2),  # 3 rows: the second group is ragged
    "loop_rows_pipelined": utils.loop_plan(128, 4, rows=4, grid=1, stages=2),
    "loop_evict_first": dataclasses.replace(utils.loop_plan(64, 4), evict_first=True),
    "split_evict_first": dataclasses.replace(utils.split_plan(700, 64), evict_first=True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("mode", list(HORIZONTAL_LOOPS))
@pytest.mark.parametrize("name", ["horizontal_reduction_pointwise", "horizontal_reduction_reduction"])
def test_horizontal_looped_row_groups(name, mode, dtype):
    args = inputs(name, (3, 700), dtype, seed=2)
    check(name, IMPL[name](*args, plan=HORIZONTAL_LOOPS[mode]), args)


def test_horizontal_plans_loop_short_rows():
    # rows that fit on chip (1024 .. MAX_ONCHIP columns) also get looped candidates; shorter ones do not
    modes = [p.mode for p in khor.horizontal_plans(4096, 4096, "cuda" if ON_GPU else "cpu")]
    assert modes[0] == "tile" and "loop" in modes and "coop" not in modes
    assert all(p.mode == "tile" for p in khor.horizontal_plans(4096, 512, DEVICE))


def test_horizontal_evict_first_candidates_only_with_cos():
    # without the cos output every plan loads evict_first anyway: no duplicates to time
    assert not any(p.evict_first for p in khor.horizontal_plans(512, 8192, DEVICE))
    with_cos = khor.horizontal_plans(512, 8192, DEVICE, with_cos=True)
    assert [p.mode for p in with_cos if p.evict_first] == ["tile", "loop"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("mode", list(LONG_PLANS))
@pytest.mark.parametrize("name", ROWWISE)
def test_long_row_plans(name, mode, dtype):
    args = inputs(name, (3, 700), dtype, seed=1)
    check(name, IMPL[name](*args, plan=LONG_PLANS[mode]), args)


TWO_PASS = ["softmax", "double_softmax", "softmax_backward", "layernorm", "norm_chain"]
# Their wrappers' candidate plans (what the autotuner chooses from).
PLANS = {"softmax": ksm.softmax_plans, "double_softmax": ksm.double_softmax_plans,
         "softmax_backward": ksm.softmax_backward_plans, "layernorm": knorm.layernorm_plans,
         "norm_chain": knorm.norm_chain_plans}


# The streamed plans (utils.RowPlan "stream"): one chain of steps per program across passes and rows.
STREAM_PLANS = {
    "stream": utils.RowPlan("stream", 1, 64, 4, grid=2),  # 11 steps per pass, the last ragged; 2 rows for one program
    "stream_two_chunks": utils.RowPlan("stream", 1, 512, 4, grid=2),  # no whole middle chunks in pass 2
    "stream_one_chunk": utils.RowPlan("stream", 1, 1024, 4, grid=4),  # a row in one step; a program with no row
}


@pytest.mark.parametrize("layout", ["contiguous", "row_stride", "col_stride"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("mode", list(STREAM_PLANS))
@pytest.mark.parametrize("name", TWO_PASS)
def test_stream_plans(name, mode, dtype, layout):
    args = inputs(name, (3, 700), dtype, seed=5)
    if layout != "contiguous":
        args = tuple(strided(a, layout.split("_")[0] + "s") if isinstance(a, torch.Tensor) else a for a in args)
    check(name, IMPL[name](*args, plan=STREAM_PLANS[mode]), args)


REREAD_PLANS = {
    "reread": utils.RowPlan("reread", 1, 256, 4, grid=2, block_n2=64),  # 3 first-pass steps, 11 second
    "reread_one_step": utils.RowPlan("reread", 1, 1024, 4, grid=4, block_n2=128),  # a row in one step
}


@pytest.mark.parametrize("layout", ["contiguous", "row_stride", "col_stride"])
@pytest.mark.parametrize("mode", list(REREAD_PLANS))
@pytest.mark.parametrize("name", ["layernorm", "double_softmax"])
def test_reread_plans(name, mode, layout):
    args = inputs(name, (3, 700), torch.float32, seed=6)
    if layout != "contiguous":
        args = tuple(strided(a, layout.split("_")[0] + "s") if isinstance(a, torch.Tensor) else a for a in args)
    check(name, IMPL[name](*args, plan=REREAD_PLANS[mode]), args)


# Rows a whole number of steps: the softmax_backward kernels drop their column masks (EVEN).
EVEN_PLANS = {
    "tile_one_row": utils.RowPlan("tile", 1, 512, 4),
    "tile_rows": utils.RowPlan("tile", 2, 512, 4),  # 3 rows: the second program's row mask stays
    "loop": utils.loop_plan(128, 4),  # 4 steps per pass
    "loop_one_step": utils.loop_plan(512, 4, grid=2),  # a pass in one step, 2 programs for 3 rows
    "loop_prefetched": utils.loop_plan(128, 4, grid=2, stages=1),  # keeps its masks: not EVEN
}


@pytest.mark.parametrize("layout", ["contiguous", "row_stride", "col_stride"])
@pytest.mark.parametrize("mode", list(EVEN_PLANS))
def test_softmax_backward_unmasked_steps(mode, layout):
    args = inputs("softmax_backward", (3, 512), torch.float32, seed=7)
    if layout != "contiguous":
        args = tuple(strided(a, layout.split("_")[0] + "s") for a in args)
    check("softmax_backward", ksm.softmax_backward_impl(*args, plan=EVEN_PLANS[mode]), args)


def test_softmax_backward_candidates_include_inductors_loop():
    plans = ksm.softmax_backward_plans(1024, 32768, DEVICE)
    assert utils.loop_plan(32768, 32) in plans and len(plans) == len(set(plans))
    assert utils.loop_plan(32768, 32) not in ksm.softmax_backward_plans(1024, 8192, DEVICE)


@pytest.mark.parametrize("prefetch, stages", [(False, None), (True, None), (False, 2)],
                         ids=["plain", "prefetch", "staged"])
@pytest.mark.parametrize("name", TWO_PASS)
def test_cooperative_kernels_one_program_per_row(name, prefetch, stages):
    # The cooperative kernels' programs of a row wait for each other's partials, which the
    # interpreter (one program after another) can do only when a row has a single program: this
    # checks their rounds, partials, combination, tags and epoch, not the exchange between
    # programs (test_gpu_cooperative_and_streamed_plans does).
    args = inputs(name, (3, 700), torch.float32, seed=9)
    sync = utils.exchange_buffer(args[0].device, 2)
    epoch = int(sync[0])
    # two rows at a time: 2 rounds (the interpreter runs the staged plan's loop as written, unpipelined)
    plan = utils.RowPlan("coop", 1, 1024, 4, splits=1, grid=2, prefetch=prefetch, stages=stages)
    check(name, IMPL[name](*args, plan=plan), args)
    # the last program moved the epoch past the launch's two tags and reset the count of finished programs
    assert (int(sync[0]), int(sync[1])) == (epoch + 3, 0)
    # each program's words of round 0 (program 0: row 0, program 1: row 1) carry the first tag
    assert (sync[2:2 + 2 * utils.SLOT_WORDS:utils.SLOT_WORDS] >> 32).tolist() == [epoch + 1] * 2


@pytest.mark.parametrize("block_n, held", [(1024, True), (4096, False)])
def test_layernorm_cooperative_weight_held_or_reloaded(block_n, held):
    # At one warp, 32 values a thread hold weight and bias across rounds under the register cap
    # of the interpreter's grid (248); 128 do not (see norms.layernorm_holds_wb).
    plan = utils.RowPlan("coop", 1, block_n, 1, splits=1, grid=2)
    cap = utils.coop_launch_args(plan, DEVICE)["maxnreg"]
    assert knorm.layernorm_holds_wb(plan.block_n, plan.num_warps, cap, False) == held
    args = inputs("layernorm", (5, 700), torch.float32, seed=11)
    check("layernorm", knorm.layernorm_impl(*args, plan=plan), args)


def test_layernorm_note_says_whether_weight_and_bias_are_held(monkeypatch):
    # The cell's note for a cooperative layernorm plan says what the launch decides
    # (norms.layernorm_holds_wb), as the registered kernel's describe_plan; other plans as before.
    from fusebench.impls import get_impl

    held = utils.RowPlan("coop", 1, 1024, 1, splits=1, grid=2)  # 32 values a thread under a 248 cap
    reread = utils.RowPlan("coop", 1, 4096, 1, splits=1, grid=2)  # 128 values a thread
    assert knorm.describe_layernorm_plan(held, DEVICE) == held.describe()[:-1] + ", weight and bias held)"
    assert knorm.describe_layernorm_plan(reread, DEVICE).endswith(", weight and bias re-read)")
    tile = utils.tile_plan(3, 700, DEVICE)
    assert knorm.describe_layernorm_plan(tile, DEVICE) == tile.describe()
    prepared = get_impl("triton").prepare(get_case("layernorm"), (3, 700), torch.float32, DEVICE)
    monkeypatch.setattr(utils, "last_choice", lambda: held)  # as if the autotuner had kept it
    assert prepared.note_after() == knorm.describe_layernorm_plan(held, DEVICE)


def test_cooperative_epoch_starts_again_near_the_limit():
    # Tags are 32-bit: near 2**30 the last program clears every slot and the epoch starts from 0,
    # so that no stale word can carry a tag of a later launch.
    args = inputs("softmax", (3, 700), torch.float32, seed=9)
    sync = utils.exchange_buffer(args[0].device, 2)
    sync[0] = 2**30 - 2
    sync[2 + 6 * utils.SLOT_WORDS] = 2**30 << 32  # a word of a program this launch does not have
    check("softmax", IMPL["softmax"](*args, plan=utils.RowPlan("coop", 1, 1024, 4, splits=1, grid=2)), args)
    assert int(sync[0]) == 0 and int(sync[2:].abs().sum()) == 0


@pytest.mark.parametrize("name", ROWWISE)
def test_heuristic_takes_long_row_plans(name):
    # max_onchip below N: the wrapper's own choice is split (few rows) on the CPU's 4 "SMs"
    args = inputs(name, (3, 300), torch.float32, seed=2)
    check(name, IMPL[name](*args, max_onchip=64), args)
    assert utils.row_plans(3, 300, DEVICE, max_onchip=64)[0].mode == "split"


# ----------------------------------------------------------------------------------------------
# layouts


@pytest.mark.parametrize("how", ["rows", "cols"])
@pytest.mark.parametrize("name", ALL)
def test_noncontiguous_inputs(name, how):
    args = tuple(strided(a, how) if isinstance(a, torch.Tensor) else a
                 for a in inputs(name, (9, 260), torch.float32, seed=3))
    check(name, KERNELS[name].fn(*args), args)


@pytest.mark.parametrize("mode", list(LONG_PLANS))
@pytest.mark.parametrize("name", ROWWISE)
def test_long_rows_with_row_stride(name, mode):
    args = tuple(strided(a, "rows") for a in inputs(name, (3, 700), torch.float16, seed=4))
    assert args[0].stride(0) == 713
    check(name, IMPL[name](*args, plan=LONG_PLANS[mode]), args)


@pytest.mark.parametrize("plan", kpw.TRANSPOSED_PLANS[:2] + kpw.TRANSPOSED_SMALL_PLANS,
                         ids=lambda p: f"{p.block_m}x{p.block_n}")
def test_transposed_output_is_row_major(plan):
    args = inputs("bias_dropout_add_transposed", (70, 130), torch.float32)
    out = kpw.bias_dropout_add_transposed_impl(*args, plan=plan)
    assert out.is_contiguous()
    check("bias_dropout_add_transposed", out, args)


@pytest.mark.parametrize("shape", [(70, 130), (33, 257)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("plan", kpw.TRANSPOSED_COLUMN_MAJOR_PLANS + [utils.TilePlan(16, 32, 4, group_m=3, out_t=True)],
                         ids=lambda p: f"{p.block_m}x{p.block_n}g{p.group_m}")
def test_transposed_column_major_output(plan, shape):
    # eager's layout: stored (N, M), so the result's transpose is contiguous; odd M (33) leaves
    # the (N, M) rows without 16-byte vectors, padded `inp` rows test its row stride
    args = inputs("bias_dropout_add_transposed", shape, torch.float32, seed=3)
    args = (strided(args[0], "rows"),) + args[1:]
    out = kpw.bias_dropout_add_transposed_impl(*args, plan=plan)
    assert out.shape == shape and out.t().is_contiguous() and not out.is_contiguous()
    check("bias_dropout_add_transposed", out, args)


@pytest.mark.parametrize("plan", kpw.column_order_plans(70), ids=lambda p: f"{p.num_warps}w-{p.out_t}")
def test_transposed_column_order(plan):
    # one group holds all 2 row blocks of 70 rows: every column block walked down in turn
    assert plan.group_m == 2
    args = inputs("bias_dropout_add_transposed", (70, 130), torch.float32, seed=8)
    check("bias_dropout_add_transposed", kpw.bias_dropout_add_transposed_impl(*args, plan=plan), args)


def transposed_fp32_plans(M, N):
    # three fp32 inputs and the output, 4 bytes each
    return kpw.transposed_plans(M, N, "cpu", traffic=4 * M * N * 4)


def test_transposed_candidates_offer_both_layouts():
    for shape in ((128, 16384), (8192, 8192)):
        assert {p.out_t for p in transposed_fp32_plans(*shape)} == {False, True}
    # load hints only where the traffic is at most a few L2s
    assert {p.evict for p in transposed_fp32_plans(128, 16384)} == {"", "evict_first", "evict_last"}
    assert {p.evict for p in transposed_fp32_plans(8192, 8192)} == {""}
    assert set(kpw.column_order_plans(32768)) <= set(transposed_fp32_plans(32768, 8192))


@pytest.mark.parametrize("plan", kpw.TRANSPOSED_HINTED_PLANS,
                         ids=lambda p: f"{p.block_m}x{p.block_n}-{p.evict}-{'cols' if p.out_t else 'rows'}")
def test_transposed_hinted_loads(plan):
    args = inputs("bias_dropout_add_transposed", (70, 130), torch.float16, seed=6)
    check("bias_dropout_add_transposed", kpw.bias_dropout_add_transposed_impl(*args, plan=plan), args)


@pytest.mark.parametrize("group_m", [2, 3, 8])
def test_transposed_grouped_order_covers_every_tile(group_m):
    # 70 rows in 16-row blocks: 5 row blocks, so the last group is ragged for 2 and 3, and one
    # short group holds them all for 8; each tile must still be written exactly once.
    args = inputs("bias_dropout_add_transposed", (70, 130), torch.float32, seed=5)
    out = kpw.bias_dropout_add_transposed_impl(*args, plan=utils.TilePlan(16, 32, 4, group_m=group_m))
    check("bias_dropout_add_transposed", out, args)


def test_transposed_small_tensors_get_small_tiles():
    big = transposed_fp32_plans(8192, 8192)
    assert big[:len(kpw.TRANSPOSED_PLANS)] == kpw.TRANSPOSED_PLANS
    assert {p.group_m for p in big} == {1, 8, 32, 8192 // 64}  # the last: column order
    assert set(kpw.TRANSPOSED_SMALL_PLANS) <= set(transposed_fp32_plans(70, 130))


@pytest.mark.parametrize("name", ["pointwise_chain", "bias_dropout_add"])
def test_elementwise_2d_tiles(name):
    # Non-flattened tiles (as for strided inputs) with ragged edges in both directions.
    args = inputs(name, (37, 45), torch.float16)
    check(name, IMPL[name](*args, plan=utils.TilePlan(8, 16, 4)), args)


# ----------------------------------------------------------------------------------------------
# numerics of the long-row formulations


@pytest.mark.parametrize("mode", ["loop", "split"])
def test_double_softmax_peaked_rows(mode):
    # One element dominating its row makes y_max ~ 1, the worst case of the power series.
    (x,) = inputs("double_softmax", (4, 700), torch.float32, seed=5)
    x[:, 17] += torch.tensor([0.0, 5.0, 20.0, 80.0], device=x.device)
    check("double_softmax", ksm.double_softmax_impl(x, plan=LONG_PLANS[mode]), (x,))


@pytest.mark.parametrize("mode", ["tile", "tile-prefetch", "loop", "split"])
def test_layernorm_large_mean(mode):
    # A mean 1000 times the spread: shifted sums keep the variance.
    x, w, b = inputs("layernorm", (3, 700), torch.float32, seed=6)
    x = x + 1000.0
    plan = utils.tile_plan(3, 700, DEVICE) if mode.startswith("tile") else LONG_PLANS[mode]
    plan = dataclasses.replace(plan, prefetch=mode == "tile-prefetch")
    check("layernorm", knorm.layernorm_impl(x, w, b, plan=plan), (x, w, b))


def test_split_counters_are_reset():
    # The split horizontal kernel's last program per row resets its counter: calls repeat.
    (a,) = inputs("horizontal_reduction_reduction", (5, 700), torch.float32, seed=7)
    first = khor.horizontal_reduction_reduction_impl(a, plan=LONG_PLANS["split"])
    again = khor.horizontal_reduction_reduction_impl(a, plan=LONG_PLANS["split"])
    check("horizontal_reduction_reduction", again, (a,))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert int(utils.zeroed_counters(a.device, 5)[:5].abs().sum()) == 0


def test_gelu_saturates():
    # exp overflow / underflow in the sigmoid form gives exactly x and 0 for large |x|.
    inp = torch.tensor([[-60.0, -12.0, 0.0, 12.0, 60.0]], device=DEVICE)
    out = kpw.bias_gelu_impl(inp, torch.zeros(5, device=DEVICE))
    ref = get_case("bias_gelu").run_reference((inp, torch.zeros(5, device=DEVICE)))
    assert torch.isfinite(out).all()
    assert torch.allclose(out.double().cpu(), ref.cpu(), atol=1e-6, rtol=1e-6)


# ----------------------------------------------------------------------------------------------
# plans (pure Python)


def test_cooperative_candidates_staged_where_shared_memory_fits(monkeypatch):
    # As on an H100 (132 SMs, 227 KiB a program): every cooperative shape is also staged 2 deep
    # (not its prefetching copy), except where the buffers of its programs per SM do not fit --
    # softmax_backward stages two inputs, which fits at 1-2 programs an SM (8192 and 4096 at 16 warps)
    # and not at 4; in bf16, half the bytes, 4096-column chunks at 4 an SM fit too.
    monkeypatch.setattr(utils, "coop_enabled", lambda device: True)
    monkeypatch.setattr(utils, "num_sms", lambda device: 132)
    def staged(plans):
        return [p for p in plans if p.mode == "coop" and p.stages]

    assert len(staged(knorm.layernorm_plans(512, 65536, "cpu"))) == len(utils.COOP_SHAPES)
    assert not any(p.prefetch for p in staged(knorm.layernorm_plans(512, 65536, "cpu")))
    shapes = {(p.block_n, p.num_warps) for p in staged(ksm.softmax_backward_plans(512, 65536, "cpu"))}
    assert shapes == {(8192, 16), (4096, 16)}
    bf16 = {(p.block_n, p.num_warps) for p in staged(ksm.softmax_backward_plans(512, 65536, "cpu", elem_size=2))}
    assert {(4096, 4), (4096, 2)} <= bf16
    # the fit itself: 4 programs x (2 stages x 4096 x 4 bytes x 2 inputs + 2 KiB) > 227 KiB
    four = dataclasses.replace(utils.coop_plan(512, 65536, "cpu", 4096, 4, 4), stages=2)
    assert utils.coop_stages_fit(four, "cpu", 4, 1) and not utils.coop_stages_fit(four, "cpu", 4, 2)


def test_row_plans_heuristic():
    assert utils.row_plans(4096, 4096, "cpu")[0].mode == "tile"
    assert utils.row_plans(4096, 16384, "cpu")[0].block_n == 16384
    assert utils.row_plans(4, 65536, "cpu")[0].mode == "split"  # few rows: all SMs busy
    assert utils.row_plans(4096, 65536, "cpu")[0].mode == "loop"  # many rows: two passes each
    # no cooperative plans where programs run one after another
    assert "coop" not in {p.mode for p in utils.row_plans(4096, 65536, "cpu")}
    coop = utils.coop_plan(4096, 65536, "cpu", 8192, 16, 2)  # 4 "SMs" x 2 programs: one row at a time
    assert (coop.splits, coop.grid) == (8, 8)
    # its register cap lets two 16-warp programs share an SM's 65536 registers
    assert utils.coop_launch_args(coop, "cpu") == dict(BLOCK_S=8, PREFETCH=False, WARPS=16, STAGES=1,
                                                    launch_cooperative_grid=True, maxnreg=64)
    staged = utils.coop_plan(4096, 65536, "cpu", 8192, 16, 2, stages=2)  # the next rounds through shared memory
    assert utils.coop_launch_args(staged, "cpu")["STAGES"] == 2 and "pipelined 2 deep" in staged.describe()
    with pytest.raises(ValueError, match="not both"):
        utils.coop_plan(4096, 65536, "cpu", 8192, 16, 2, prefetch=True, stages=2)
    assert utils.coop_launch_args(utils.coop_plan(64, 32768, "cpu", 8192, 16, 1), "cpu")["maxnreg"] == 128
    p = utils.row_plans(65536, 128, "cpu")[0]
    assert p.block_m * p.block_n == 4096 and p.num_warps == 8
    assert utils.split_plan(65536, 4096).splits == 16
    # layernorm's tiles also come with weight and bias loaded early, where that cannot spill
    plain = utils.row_plans(512, 8192, "cpu")
    early = [p for p in utils.row_plans(512, 8192, "cpu", tile_prefetch=True) if p.prefetch]
    assert not any(p.prefetch for p in plain) and early
    assert all(p.block_m * p.block_n <= 16 * 32 * p.num_warps for p in early)
    assert {dataclasses.replace(p, prefetch=False) for p in early} <= set(plain)


def test_tile_2d_plans():
    assert utils.tile_2d_plans(1, 10**6)[0] == utils.TilePlan(1, 8192, 16)
    assert utils.tile_2d_plans(65536, 128)[0] == utils.TilePlan(64, 128, 16)
    assert utils.tile_2d_plans(3, 5)[0].block_m == 4
    # a small tensor: only small tiles (most programs), not one program holding it all
    assert utils.tile_2d_plans(1, 16384, min_programs=132) == [utils.TilePlan(1, n, 4) for n in (1024, 512, 256, 128)]
    assert len(utils.tile_2d_plans(1, 2**24, min_programs=132)) == 4
    # one spread tile left (256 programs of 1024): the smaller ones join it
    assert utils.tile_2d_plans(1, 2**18, min_programs=132) == [utils.TilePlan(1, n, 4) for n in (1024, 512, 256, 128)]


def test_vector_align():
    assert utils.vector_align(4, 5000, 5000) == 4  # 16-byte vectors of fp32
    assert utils.vector_align(2, 5000, 5000) == 8  # of fp16
    assert utils.vector_align(4, 1030, 1030) == 2
    assert utils.vector_align(4, 4096, 4109) == 1  # a padded row stride
    assert utils.vector_align(1, 64) == 16


# ----------------------------------------------------------------------------------------------
# GPU only: sizes where the heuristics pick every plan themselves, bf16, autotuning


@gpu
@pytest.mark.parametrize("shape", [(4, 70000), (600, 20000), (1000, 3000), (20000, 100), (100, 300)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", ALL)
def test_gpu_sizes(name, shape, dtype):
    args = inputs(name, shape, dtype, seed=8)
    check(name, KERNELS[name].fn(*args), args)


@gpu
@pytest.mark.parametrize("shape, dtype", [((300, 70000), torch.float32), ((7, 20000), torch.bfloat16)],
                         ids=["300x70000-fp32", "7x20000-bf16"])
@pytest.mark.parametrize("name", TWO_PASS)
def test_gpu_cooperative_and_streamed_plans(name, shape, dtype):
    # Every split, cooperative, streamed and re-reading plan the autotuner may choose, forced: programs
    # of a row on different SMs exchanging partials; persistent programs taking several rows each, in
    # big steps (300 rows: several rounds; 70000 and 20000 columns: the last chunk ragged).  Every
    # cooperative plan fits (its register cap, utils.coop_launch_args).
    args = inputs(name, shape, dtype, seed=4)
    plans = [p for p in PLANS[name](*shape, DEVICE, max_onchip=1024) if p.mode in ("split", "coop", "stream", "reread")]
    assert any(p.mode == "coop" for p in plans)
    for plan in plans:
        checked(name, IMPL[name](*args, plan=plan), args, plan)


@gpu
@pytest.mark.parametrize("shape", [(1000, 65536), (300, 70000)], ids=["1000x65536", "300x70000"])
@pytest.mark.parametrize("name", TWO_PASS)
def test_gpu_cooperative_exchange_repeated(name, shape):
    # The exchange between the programs of a row is a race if it is wrong (session 17: a warp went on
    # with a stale copy of the partials in a few rows of a few calls): each cooperative plan three
    # times on new inputs, every element checked (on the GPU, against one reference per input).
    case = get_case(name)
    atol, rtol = case.tolerance(torch.float32)
    plans = [p for p in PLANS[name](*shape, DEVICE) if p.mode == "coop"]
    # each with and without the prefetch, and staged where that fits
    assert sum(not p.stages for p in plans) == 2 * len(utils.COOP_SHAPES) and any(p.stages for p in plans)
    for seed in range(3):
        args = inputs(name, shape, torch.float32, seed=10 + seed)
        ref = case.run_reference(args).to(args[0].device)
        bound = atol * ref.abs().max() + rtol * ref.abs()
        for plan in plans:
            bad = int(((IMPL[name](*args, plan=plan).double() - ref).abs() > bound).sum())
            assert bad == 0, f"{plan.describe()}, seed {10 + seed}: {bad} elements out of tolerance"


def checked(name, out, args, plan):
    """check(), naming the plan when it fails."""
    try:
        check(name, out, args)
    except AssertionError as exc:
        raise AssertionError(f"{plan.describe()}: {exc}") from None


# ----------------------------------------------------------------------------------------------
# what the single-pass kernels compile to (sm_90 SASS, built offline: no GPU needed)

_SASS_SAMPLE = """
        /*0090*/                   LDG.E.128 R4, desc[UR4][R2.64] ;          /* 0x0000000402047981 */
        /*00a0*/               @P0 LDG.E.128 R8, desc[UR4][R6.64] ;          /* 0x0000000406080981 */
        /*00b0*/                   STS [R0+UR5], R4 ;                        /* 0x0000000400007988 */
        /*00c0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;             /* 0x0000000000007b1d */
        /*00d0*/               @P1 LDG.E.128 R12, desc[UR4][R10.64] ;        /* 0x000000040a0c1981 */
        /*00e0*/                   FADD R4, R4, R12 ;                        /* 0x0000000c04047221 */
        /*00f0*/                   STG.E.128 desc[UR4][R2.64], R4 ;          /* 0x0000000402007986 */
        /*0100*/                   EXIT ;                                    /* 0x000000000000794d */
"""


def test_memory_op_order_of_sass_text():
    from fusebench.kernels.sass import loads_after_first_barrier, memory_op_order

    n, order = memory_op_order(_SASS_SAMPLE)
    assert (n, order) == (8, "LDGx2 STS BAR LDG STG EXIT")
    assert loads_after_first_barrier(order)
    assert not loads_after_first_barrier("LDGx8 STSx14 LDGx4 STSx2 BAR LDSx16 STGx3 EXIT")
    assert not loads_after_first_barrier("LDGx3 STG EXIT")  # no barrier at all


def _sass_report(*args: str) -> dict:
    """The JSON of `python -m fusebench.kernels.sass ARGS`: kernels compiled for sm_90 by the real JIT
    (a subprocess without the interpreter).  Skips without Triton's NVIDIA backend tools."""
    import json
    import subprocess
    import sys

    from fusebench.kernels.sass import tool_path

    if not all(os.path.exists(tool_path(t)) for t in ("ptxas", "cuobjdump")):
        pytest.skip("Triton's NVIDIA backend tools (ptxas, cuobjdump) are not installed")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-m", "fusebench.kernels.sass", *args], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_single_pass_kernels_issue_every_load_before_the_first_barrier():
    """One DRAM round trip per program: no single-pass kernel may issue a global load after a barrier."""
    from fusebench.kernels.sass import loads_after_first_barrier

    kernels = _sass_report()
    assert len(kernels) >= 10 and any(k.startswith("bias_dropout_add_transposed") for k in kernels)
    late = {k: v["order"] for k, v in kernels.items() if loads_after_first_barrier(v["order"])}
    assert late == {}


def test_unmasked_long_row_plans_do_not_spill():
    """Inductor's two-pass shape for softmax_backward at 32768 columns (64 registers a thread at
    32 warps) is only fast unspilled: no stack."""
    usage = _sass_report("--usage")
    assert "softmax_backward loop 32768 32w" in usage
    assert {k: v["stack"] for k, v in usage.items() if v["stack"]} == {}
    assert usage["softmax_backward loop 32768 32w"]["registers"] <= 64  # 32 warps: 64 a thread at most


def test_cooperative_plans_fit_their_register_cap():
    """Two or four cooperative programs share an SM only under the register cap
    (utils.coop_launch_args); under it, ptxas spills at most 8 bytes in the plans without a prefetch,
    staged or not."""
    usage = _sass_report("--coop")
    staged = {k for k in usage if " staged" in k}
    # every shape of each kernel, and staged where its buffers fit (softmax_backward: 2 of them)
    assert len(usage) - len(staged) == 5 * len(utils.COOP_SHAPES) and len(staged) == 4 * len(utils.COOP_SHAPES) + 2
    assert sum(k.endswith("weight held") for k in usage) == 10
    assert {k: v for k, v in usage.items() if v["registers"] > v["cap"] or v["stack"] > 8} == {}
    # the staged plans' rounds go through shared memory (cp.async); the others' do not
    assert {k for k, v in usage.items() if v["async_copies"]} == staged


def test_l2_flush_kernel_zeroes_the_whole_buffer():
    # measure.timing's flush: evict_last stores over a buffer that is not a multiple of the block
    from fusebench.measure.l2flush import zero_evict_last

    buf = torch.arange(1, 20_002, dtype=torch.int32, device=DEVICE)
    zero_evict_last(buf)
    assert int(buf.abs().sum()) == 0


def test_l2_flush_modes():
    # "clean" zeroes the first half and only reads the second (the read sweep writes nothing back)
    from fusebench.measure.timing import _flush_l2

    buf = torch.arange(1, 40_003, dtype=torch.int32, device=DEVICE)[:40_002]
    written, swept = buf.chunk(2)
    before = swept.clone()
    _flush_l2(buf, "clean")
    assert int(written.abs().sum()) == 0 and torch.equal(swept, before)
    with pytest.raises(ValueError, match="unknown L2 flush mode 'wipe'"):
        _flush_l2(buf, "wipe")


@gpu
def test_gpu_discard_flush_keeps_other_buffers():
    # "discard" drops only the flush buffer's own lines: a buffer written (dirty in L2) just before
    # the flush keeps its data
    from fusebench.measure.timing import _flush_buffer, _flush_l2

    y = torch.arange(1 << 22, dtype=torch.int32, device="cuda")
    for i in range(3):
        y.add_(1)
        _flush_l2(_flush_buffer("cuda:0"), "discard")
    torch.cuda.synchronize()
    assert torch.equal(y, torch.arange(1 << 22, dtype=torch.int32, device="cuda") + 3)


@gpu
def test_gpu_discard_outputs_keeps_the_inputs_named():
    # The warm call's outputs are dropped from L2 (contents undefined), but not a tensor of `keep`,
    # whose lines, written just before and dirty in L2, must reach memory.
    from fusebench.measure.l2flush import discard_outputs

    kept = torch.arange(1 << 20, dtype=torch.int32, device="cuda")
    for i in range(3):
        kept.add_(1)
        scratch = kept + 5
        discard_outputs((kept, [scratch]), keep=[kept])
    torch.cuda.synchronize()
    assert torch.equal(kept, torch.arange(1 << 20, dtype=torch.int32, device="cuda") + 3)


def test_shadow_operands_copy_layout_alignment_and_values():
    # the autotuner's warm call launches on these: same shapes, strides and 16-byte alignment (so the
    # JIT picks the same binary), the inputs' values, in new memory; None passes through
    base = torch.randn(40, 70, device=DEVICE)
    view = base[3:, 1:65]  # a row stride of 70 and an offset of 211 elements: not 16-byte aligned
    out = torch.empty(8, 5, device=DEVICE).t()
    copies = utils.shadow_operands([view, None, out])
    assert copies[1] is None
    for t, c in ((view, copies[0]), (out, copies[2])):
        assert c.shape == t.shape and c.stride() == t.stride() and c.dtype == t.dtype
        assert c.data_ptr() % 16 == t.data_ptr() % 16 and c.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    assert torch.equal(copies[0], view)
    assert utils.shadow_operands([view], max_bytes=view.numel() * 4 - 1) is None


def test_autotune_warm_call_drops_only_the_shadow_outputs(monkeypatch):
    # the autotuner's warm launch on the shadow operands is followed by dropping its outputs (the
    # last n_outputs shadows, None among them passed along) from L2, as a cell's warm call does;
    # the shadow inputs, which every warm launch reads again, are not dropped
    from fusebench.measure import l2flush

    dropped, launched = [], []
    monkeypatch.setattr(l2flush, "discard_outputs", lambda out, keep=(): dropped.append(out))
    monkeypatch.setattr(l2flush, "touch_pages", lambda tensors: None)
    operands = (torch.ones(4), torch.zeros(4), None, torch.zeros(4))
    shadow = utils.shadow_operands(operands)
    warm = utils._warm_for("plan", lambda p, *ops: launched.append((p, ops)), operands, shadow, n_outputs=3)
    warm()
    assert launched == [("plan", tuple(shadow))]
    assert len(dropped) == 1 and len(dropped[0]) == 3
    assert dropped[0][0] is shadow[1] and dropped[0][1] is None and dropped[0][2] is shadow[3]
    assert utils._warm_for("plan", lambda p, *ops: None, operands, None) is None


@gpu
def test_gpu_warm_call_runs_after_each_flush_and_only_with_one():
    from fusebench.measure.timing import TimingSettings, time_call

    x = torch.randn(1 << 16, device="cuda")
    calls = []
    settings = TimingSettings(warmup_ms=1, rep_ms=2, min_reps=5, max_reps=20)
    stats = time_call(lambda: x.add(1), "cuda", settings, warm=lambda: calls.append(x.add(2)))
    assert len(calls) >= stats.reps + 1
    calls.clear()
    time_call(lambda: x.add(1), "cuda", TimingSettings(warmup_ms=1, rep_ms=2, min_reps=5, max_reps=20, flush_l2=False),
              warm=lambda: calls.append(1))
    assert calls == []


@gpu
def test_gpu_autotune_times_candidates_with_the_warm_launch(monkeypatch):
    # each candidate's timing passes a warm call that launches it on copies of the operands
    seen = []
    real = utils.gpu_time_ms

    def spy(fn, device, budget_ms=5.0, warm=None):
        seen.append(warm)
        return real(fn, device, budget_ms, warm=warm)

    monkeypatch.setattr(utils, "gpu_time_ms", spy)
    x = torch.randn(3, 1000, device="cuda") + 17  # a shape no other test tunes
    y = kpw.pointwise_chain_impl(x)
    assert seen and all(w is not None for w in seen)
    torch.testing.assert_close(y, get_case("pointwise_chain").fn(x))


@gpu
def test_gpu_autotune_retimes_close_candidates_interleaved(monkeypatch, tmp_path):
    # candidates within the margin (here all of them) are timed again in turn; the kept one is the
    # fastest of that second timing, and the log says so
    log = tmp_path / "tune.log"
    monkeypatch.setenv("FUSEBENCH_AUTOTUNE_LOG", str(log))
    monkeypatch.setattr(utils, "FINALIST_MARGIN", 10.0)
    x = torch.randn(5, 1000, device="cuda")
    out = torch.empty_like(x)
    rounds = []
    real = utils.time_interleaved

    def spy(fns, device, st, n, warms=None):
        rounds.append((len(fns), n))
        return real(fns, device, st, n, warms)

    monkeypatch.setattr(utils, "time_interleaved", spy)
    best = utils.autotune(("test-finalists", 5, 1000), ["a", "b", "c"], lambda p, x, y: y.copy_(x * 2),
                          "cuda", (x, out))
    text = log.read_text()
    assert len(rounds) == 1 and rounds[0][0] == 3 and 10 <= rounds[0][1] <= 50
    finals = [line.split() for line in text.splitlines() if line.strip().startswith("final")]
    assert len(finals) == 3 and f"kept {best}" in text
    assert best == min(finals, key=lambda f: float(f[1]))[3]
    torch.testing.assert_close(out, x * 2)


@pytest.mark.parametrize("plan,kind", [(utils.TilePlan(4, 64, 4), "both"), (utils.TilePlan(4, 256, 4), "rows"),
                                       (utils.TilePlan(64, 64, 4), "cols")])
def test_element_wise_tiles_on_each_grid_kind(plan, kind):
    # _tile's three index paths (2-D grid, programs along rows only, along columns only) on a view
    # with a row stride of 300 and a ragged last tile each way
    x = torch.randn(37, 300, device=DEVICE)[:, :250]
    b, r = torch.randn(37, 250, device=DEVICE), torch.randn(250, 37, device=DEVICE).t()
    assert kpw._grid_kind(*x.shape, plan) == kind
    torch.testing.assert_close(kpw.pointwise_chain_impl(x, plan=plan), get_case("pointwise_chain").fn(x))
    torch.testing.assert_close(kpw.bias_dropout_add_impl(x, b, r, plan=plan),
                               get_case("bias_dropout_add").fn(x, b, r))


@gpu
def test_gpu_touch_pages_reads_without_writing():
    # the warm call's page touch: any dtype and view, the tensors left as they were
    from fusebench.measure.l2flush import touch_pages

    a = torch.randn(3000, 700, device="cuda")
    b = torch.randint(0, 255, (1 << 20,), dtype=torch.uint8, device="cuda")
    before = (a.clone(), b.clone())
    touch_pages([a[5:, 3:], b, None, torch.empty(0, device="cuda"), 3])
    torch.cuda.synchronize()
    assert torch.equal(a, before[0]) and torch.equal(b, before[1])


@gpu
def test_gpu_timing_gives_a_slow_host_a_head_start(monkeypatch):
    # a host slower than the GPU (here: 300 us of sleep in the warm call's host part) must not be
    # charged to the call: the GPU is found idle before reps and spun ahead first
    import time as _time

    from fusebench.measure import timing as tm

    x = torch.randn(1 << 12, device="cuda")
    settings = tm.TimingSettings(warmup_ms=1, rep_ms=2, min_reps=20, max_reps=20)
    spins = []
    real_sleep = torch.cuda._sleep
    monkeypatch.setattr(torch.cuda, "_sleep", lambda c: (spins.append(c), real_sleep(c)))
    slow = tm.time_call(lambda: x.add(1), "cuda", settings, warm=lambda: _time.sleep(300e-6))
    assert sum(c >= tm.HEAD_START_CYCLES for c in spins) >= 10  # found idle at most spins (x.add's cover is less)
    fast = tm.time_call(lambda: x.add(1), "cuda", settings)
    assert slow.median_us < fast.median_us + 5  # a starved call would take the host's 300 us


def test_element_wise_hinted_candidates_only_for_small_traffic():
    small = kpw.element_wise_plans(1, 2**18, "cpu", traffic=2 << 20)
    assert {p.evict for p in small} == {"", "evict_first", "evict_last"}
    assert {p.evict for p in kpw.element_wise_plans(1, 2**26, "cpu", traffic=512 << 20)} == {""}


@pytest.mark.parametrize("evict", ["evict_first", "evict_last"])
@pytest.mark.parametrize("name", ["pointwise_chain", "bias_gelu", "bias_dropout_add"])
def test_element_wise_hinted_loads(name, evict):
    args = inputs(name, (33, 130), torch.float32, seed=7)
    check(name, IMPL[name](*args, plan=utils.TilePlan(8, 64, 4, evict=evict)), args)
