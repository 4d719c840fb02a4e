"""The row-wise kernels (softmax, double_softmax, softmax_backward, layernorm, norm_chain): every
plan mode on odd shapes (forced through the wrappers' `plan` argument), strided inputs, the
cooperative exchange's bookkeeping, numerics of the long-row formulations, and the candidate lists.
"""
import dataclasses

import pytest
import torch

from fusebench.cases.base import get_case
from fusebench.kernels import KERNELS, exchange, launch_plans, rowops, rowwise
import fusebench.kernels.norms as knorm
import fusebench.kernels.softmax as ksm
from kernel_checks import DEVICE, IMPL, LONG_PLANS, TWO_PASS, check, check_plan, checked, gpu, inputs, strided

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# Their wrappers' candidate plans (what the tuner chooses from).
PLANS = {"softmax": ksm.softmax_plans, "double_softmax": ksm.double_softmax_plans,
         "softmax_backward": ksm.softmax_backward_plans, "layernorm": knorm.layernorm_plans,
         "norm_chain": knorm.norm_chain_plans}
OPS = {"softmax": ksm.SOFTMAX, "double_softmax": ksm.DOUBLE_SOFTMAX, "softmax_backward": ksm.SOFTMAX_BACKWARD,
       "layernorm": knorm.LAYERNORM, "norm_chain": knorm.NORM_CHAIN}


# ----------------------------------------------------------------------------------------------
# long rows, forced at small sizes

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("mode", list(LONG_PLANS))
@pytest.mark.parametrize("name", TWO_PASS)
def test_long_row_plans(name, mode, dtype):
    check_plan(name, LONG_PLANS[mode], dtype)


@pytest.mark.parametrize("mode", list(LONG_PLANS))
@pytest.mark.parametrize("name", TWO_PASS)
def test_long_rows_with_row_stride(name, mode):
    args = tuple(strided(a, "rows") for a in inputs(name, (3, 700), torch.float16, seed=4))
    assert args[0].stride(0) == 713
    check(name, IMPL[name](*args, plan=LONG_PLANS[mode]), args)


STREAM_PLANS = {
    "stream": launch_plans.RowPlan("stream", 1, 64, 4, grid=2),  # 11 steps per pass, the last ragged; 2 rows for one program
    "stream_two_chunks": launch_plans.RowPlan("stream", 1, 512, 4, grid=2),  # no whole middle chunks in pass 2
    "stream_one_chunk": launch_plans.RowPlan("stream", 1, 1024, 4, grid=4),  # a row in one step; a program with no row
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
    "reread": launch_plans.RowPlan("reread", 1, 256, 4, grid=2, block_n2=64),  # 3 first-pass steps, 11 second
    "reread_one_step": launch_plans.RowPlan("reread", 1, 1024, 4, grid=4, block_n2=128),  # a row in one step
}


@pytest.mark.parametrize("layout", ["contiguous", "row_stride", "col_stride"])
@pytest.mark.parametrize("mode", list(REREAD_PLANS))
@pytest.mark.parametrize("name", ["layernorm", "double_softmax"])
def test_reread_plans(name, mode, layout):
    args = inputs(name, (3, 700), torch.float32, seed=6)
    if layout != "contiguous":
        args = tuple(strided(a, layout.split("_")[0] + "s") if isinstance(a, torch.Tensor) else a for a in args)
    check(name, IMPL[name](*args, plan=REREAD_PLANS[mode]), args)


EVEN_PLANS = {
    "tile_one_row": launch_plans.RowPlan("tile", 1, 512, 4),
    "tile_rows": launch_plans.RowPlan("tile", 2, 512, 4),  # 3 rows: the second program's row mask stays
    "loop": launch_plans.loop_plan(128, 4),  # 4 steps per pass
    "loop_one_step": launch_plans.loop_plan(512, 4, grid=2),  # a pass in one step, 2 programs for 3 rows
    "loop_prefetched": launch_plans.loop_plan(128, 4, grid=2, stages=1),  # keeps its masks: not EVEN
}


@pytest.mark.parametrize("layout", ["contiguous", "row_stride", "col_stride"])
@pytest.mark.parametrize("mode", list(EVEN_PLANS))
def test_softmax_backward_unmasked_steps(mode, layout):
    args = inputs("softmax_backward", (3, 512), torch.float32, seed=7)
    if layout != "contiguous":
        args = tuple(strided(a, layout.split("_")[0] + "s") for a in args)
    check("softmax_backward", ksm.softmax_backward_impl(*args, plan=EVEN_PLANS[mode]), args)


def test_softmax_backward_candidates_include_inductors_loop():
    cands = ksm.softmax_backward_plans(1024, 32768, DEVICE)
    assert launch_plans.loop_plan(32768, 32) in cands and len(cands) == len(set(cands))
    assert launch_plans.loop_plan(32768, 32) not in ksm.softmax_backward_plans(1024, 8192, DEVICE)


@pytest.mark.parametrize("prefetch, stages", [(False, None), (True, None), (False, 2)],
                         ids=["plain", "prefetch", "staged"])
@pytest.mark.parametrize("name", TWO_PASS)
def test_cooperative_kernels_one_program_per_row(name, prefetch, stages):
    # The cooperative kernels' programs of a row wait for each other's partials, which the
    # interpreter (one program after another) can do only when a row has a single program: this
    # checks their rounds, partials, combination, tags and epoch, not the exchange between
    # programs (test_gpu_cooperative_and_streamed_plans does).
    args = inputs(name, (3, 700), torch.float32, seed=9)
    sync = exchange.exchange_buffer(args[0].device, 2)
    epoch = int(sync[0])
    # two rows at a time: 2 rounds (the interpreter runs the staged plan's loop as written, unpipelined)
    plan = launch_plans.RowPlan("coop", 1, 1024, 4, splits=1, grid=2, prefetch=prefetch, stages=stages)
    check(name, IMPL[name](*args, plan=plan), args)
    # the last program moved the epoch past the launch's two tags and reset the count of finished programs
    assert (int(sync[0]), int(sync[1])) == (epoch + 3, 0)
    # each program's words of round 0 (program 0: row 0, program 1: row 1) carry the first tag
    assert (sync[2:2 + 2 * exchange.SLOT_WORDS:exchange.SLOT_WORDS] >> 32).tolist() == [epoch + 1] * 2


@pytest.mark.parametrize("block_n, held", [(1024, True), (4096, False)])
def test_layernorm_cooperative_weight_held_or_reloaded(block_n, held):
    # At one warp, 32 values a thread hold weight and bias across rounds under the register cap
    # of the interpreter's grid (248); 128 do not (see norms.layernorm_holds_wb).
    plan = launch_plans.RowPlan("coop", 1, block_n, 1, splits=1, grid=2)
    cap = launch_plans.coop_launch_args(plan, DEVICE)["maxnreg"]
    assert knorm.layernorm_holds_wb(plan.block_n, plan.num_warps, cap, False) == held
    args = inputs("layernorm", (5, 700), torch.float32, seed=11)
    check("layernorm", knorm.layernorm_impl(*args, plan=plan), args)


def test_layernorm_note_says_whether_weight_and_bias_are_held(monkeypatch):
    # The cell's note for a cooperative layernorm plan says what the launch decides
    # (norms.layernorm_holds_wb), as the registered kernel's describe_plan; other plans as before.
    from fusebench.impls import get_impl

    held = launch_plans.RowPlan("coop", 1, 1024, 1, splits=1, grid=2)  # 32 values a thread under a 248 cap
    reread = launch_plans.RowPlan("coop", 1, 4096, 1, splits=1, grid=2)  # 128 values a thread
    assert knorm.describe_layernorm_plan(held, DEVICE) == held.describe()[:-1] + ", weight and bias held)"
    assert knorm.describe_layernorm_plan(reread, DEVICE).endswith(", weight and bias re-read)")
    tile = launch_plans.tile_plan(3, 700, DEVICE)
    assert knorm.describe_layernorm_plan(tile, DEVICE) == tile.describe()
    # the note after a run names the plan the kernel's run() returned (as if the tuner had kept it)
    monkeypatch.setattr(KERNELS["layernorm"], "run", lambda *a: (knorm.layernorm_impl(*a, plan=held), held))
    prepared = get_impl("triton").prepare(get_case("layernorm"), (3, 700), torch.float32, DEVICE)
    assert prepared.note_after() is None  # nothing ran yet
    args = inputs("layernorm", (3, 700), torch.float32)
    check("layernorm", prepared.fn(*args), args)
    assert prepared.note_after() == knorm.describe_layernorm_plan(held, DEVICE)


def test_cooperative_epoch_starts_again_near_the_limit():
    # Tags are 32-bit: near 2**30 the last program clears every slot and the epoch starts from 0,
    # so that no stale word can carry a tag of a later launch.
    args = inputs("softmax", (3, 700), torch.float32, seed=9)
    sync = exchange.exchange_buffer(args[0].device, 2)
    sync[0] = 2**30 - 2
    sync[2 + 6 * exchange.SLOT_WORDS] = 2**30 << 32  # a word of a program this launch does not have
    check("softmax", IMPL["softmax"](*args, plan=launch_plans.RowPlan("coop", 1, 1024, 4, splits=1, grid=2)), args)
    assert int(sync[0]) == 0 and int(sync[2:].abs().sum()) == 0

@pytest.mark.parametrize("name", TWO_PASS)
def test_heuristic_takes_long_row_plans(name):
    # max_onchip below N: the wrapper's own choice is a looped plan on the CPU (no cooperative plans there)
    args = inputs(name, (3, 300), torch.float32, seed=2)
    check(name, IMPL[name](*args, max_onchip=64), args)
    assert PLANS[name](3, 300, DEVICE, max_onchip=64)[0].mode == "loop"


@pytest.mark.parametrize("name", TWO_PASS)
def test_run_returns_the_plan_it_launched(name):
    args = inputs(name, (3, 300), torch.float32, seed=2)
    out, plan = KERNELS[name].run(*args)
    check(name, out, args)
    cands = PLANS[name](3, 300, DEVICE)
    # no tuning off the GPU: the heuristic's plan; on a GPU the tuner's choice among the candidates
    assert plan == cands[0] if torch.device(DEVICE).type == "cpu" else plan in cands
    forced = launch_plans.loop_plan(64, 4)
    out, plan = rowwise.call(OPS[name], args[:OPS[name].inputs], args[OPS[name].inputs:], lambda: [], forced, "")
    assert plan == forced
    check(name, out, args)


@pytest.mark.parametrize("name", TWO_PASS)
def test_each_op_offers_only_the_modes_it_has(name):
    # no split plans for the row-wise ops; reread only where the op has its steps
    cands = PLANS[name](512, 65536, DEVICE) + PLANS[name](4, 65536, DEVICE)
    modes = {p.mode for p in cands}
    assert "split" not in modes and modes <= {m.value for m in OPS[name].modes}
    assert ("reread" in modes) == (name in ("layernorm", "double_softmax"))
    args = inputs(name, (3, 300), torch.float32)
    with pytest.raises(ValueError, match="no split plan"):
        IMPL[name](*args, plan=launch_plans.split_plan(300, 64))


# ----------------------------------------------------------------------------------------------
# numerics of the long-row formulations


@pytest.mark.parametrize("mode", ["loop", "stream", "reread"])
def test_double_softmax_peaked_rows(mode):
    # One element dominating its row makes y_max ~ 1, the worst case of the power series.
    (x,) = inputs("double_softmax", (4, 700), torch.float32, seed=5)
    x[:, 17] += torch.tensor([0.0, 5.0, 20.0, 80.0], device=x.device)
    plan = {"loop": LONG_PLANS["loop"], "stream": STREAM_PLANS["stream"], "reread": REREAD_PLANS["reread"]}[mode]
    check("double_softmax", ksm.double_softmax_impl(x, plan=plan), (x,))


def test_tiles_take_64_bit_offsets_only_past_2_to_the_31():
    # (M, N, a's row and column strides, b's, the output's row stride)
    assert not rowops.wide_offsets((32766, 65535, 65535, 1, 65535, 1, 65535), 1)  # 32768 * 65535 < 2**31
    assert rowops.wide_offsets((32768, 65536, 65536, 1, 65536, 1, 65536), 1)  # 2**31 elements
    assert rowops.wide_offsets((1000, 100, 100, 1, 3_000_000, 1, 100), 4)  # b's rows far apart
    assert rowops.wide_offsets((10, 10, 10, 1, 10, -300_000_000, 10), 1)  # a reversed column stride
    launch, _ = rowwise._launch_for(ksm.SOFTMAX, (torch.zeros(4, 8),), launch_plans.RowPlan("tile", 2, 8, 1))
    assert launch.constants["WIDE"] is False


@pytest.mark.parametrize("layout", ["contiguous", "row_stride", "col_stride"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("shape, block_m", [((5, 1000), 1), ((7, 300), 2), ((3, 40), 4)])
@pytest.mark.parametrize("name", ["softmax", "double_softmax"])
def test_one_reduction_tiles(name, shape, block_m, dtype, layout):
    # Groups of -inf (a whole row but one value, half a row) and padding: the pairs' combine and the
    # exponentials must not turn them into NaN.
    (x,) = inputs(name, shape, dtype, seed=8)
    x[0, :] = float("-inf")
    x[0, 3] = 1.0
    x[1, : shape[1] // 2] = float("-inf")
    plan = launch_plans.RowPlan("tile", block_m, launch_plans.next_pow2(shape[1]), 4, one_reduction=True)
    run = ksm.softmax_run if name == "softmax" else ksm.double_softmax_run
    y, ran = run(strided(x, layout) if layout != "contiguous" else x, plan=plan)
    assert ran.one_reduction and "one reduction" in ran.describe()
    check(name, y, (x,))


def test_one_reduction_tiles_are_candidates_of_long_rows_only():
    plain = launch_plans.row_plans(512, 16384, "cpu")
    one = [p for p in ksm.softmax_plans(512, 16384, "cpu") if p.one_reduction]
    assert not any(p.one_reduction for p in plain) and one
    assert {dataclasses.replace(p, one_reduction=False) for p in one} == {p for p in plain if p.block_m == 1}
    assert not any(p.one_reduction for p in ksm.softmax_plans(512, 2048, "cpu"))
    # rows longer than a tile's: the one-row 16- and 32-warp tiles
    assert {(p.block_n, p.num_warps) for p in ksm.softmax_plans(512, 32768, "cpu") if p.one_reduction} == \
        {(32768, 16), (32768, 32)}
    with pytest.raises(ValueError, match="no one-reduction tile"):
        rowwise._launch_for(knorm.LAYERNORM, (torch.zeros(4, 8),),
                            launch_plans.RowPlan("tile", 1, 8, 1, one_reduction=True))


@pytest.mark.parametrize("mode", ["tile", "tile-prefetch", "loop", "stream", "reread", "coop"])
def test_layernorm_large_mean(mode):
    # A mean 1000 times the spread: shifted sums keep the variance.
    x, w, b = inputs("layernorm", (3, 700), torch.float32, seed=6)
    x = x + 1000.0
    plan = {"loop": LONG_PLANS["loop"], "stream": STREAM_PLANS["stream"], "reread": REREAD_PLANS["reread"],
            "coop": launch_plans.RowPlan("coop", 1, 1024, 4, splits=1, grid=2)}.get(mode) or launch_plans.tile_plan(3, 700, DEVICE)
    plan = dataclasses.replace(plan, prefetch=mode == "tile-prefetch")
    check("layernorm", knorm.layernorm_impl(x, w, b, plan=plan), (x, w, b))


@pytest.mark.parametrize("mode", ["tile", "tile-prefetch", "loop", "stream", "reread", "coop"])
def test_layernorm_saves_row_statistics(mode):
    # save=True: the output as without it, and each row's (mean, rstd) for the backward; the tile
    # holds 4 rows a program, so its second program has rows past M (5) whose statistics it must
    # not write.
    x, w, b = inputs("layernorm", (5, 700), torch.float32, seed=8)
    x = x * 3 + 100.0
    plan = {"loop": LONG_PLANS["loop"], "stream": STREAM_PLANS["stream"], "reread": REREAD_PLANS["reread"],
            "coop": launch_plans.RowPlan("coop", 1, 1024, 4, splits=1, grid=2)}.get(mode) or launch_plans.RowPlan(
                "tile", 4, 1024, 4, prefetch=mode == "tile-prefetch")
    (y, stats), ran = knorm.layernorm_run(x, w, b, plan=plan, save=True)
    assert ran == plan
    # (compiled, the saving tile may contract its arithmetic differently: last-bit differences)
    torch.testing.assert_close(y, knorm.layernorm_impl(x, w, b, plan=plan), rtol=1e-5, atol=1e-5)
    xd = x.double()
    want = torch.stack([xd.mean(1), 1 / torch.sqrt(xd.var(1, unbiased=False) + knorm.LAYERNORM_EPS)], 1)
    assert stats.shape == (5, 2) and stats.dtype == torch.float32
    torch.testing.assert_close(stats.double(), want, rtol=1e-5, atol=1e-5)


def test_saving_runs_are_tuned_apart(monkeypatch):
    # A run with save=True asks the tuner under a key of its own and times the saving launch (its
    # candidates write the statistics); a run without it, the plain one.
    asked = []

    def tuner(key, cands, launch, device, operands, **kw):
        launch(cands[0], *operands)
        asked.append((key, operands))
        return cands[0]

    monkeypatch.setattr(rowwise.tuning, "autotune", tuner)
    rowwise._CACHE.clear()
    x, w, b = inputs("layernorm", (5, 700), torch.float32, seed=3)
    (_, stats), _ = knorm.layernorm_run(x, w, b, save=True)
    knorm.layernorm_run(x, w, b)
    (save_key, save_ops), (plain_key, plain_ops) = asked
    assert save_key[:2] == ("layernorm", "save") and plain_key[1] != "save"
    torch.testing.assert_close(save_ops[-2], stats, rtol=0, atol=0)  # the tuner's launch wrote them
    assert len(save_ops) == len(plain_ops) + 1


def test_only_ops_with_row_constants_save_them():
    x = torch.randn(3, 64, device=DEVICE)
    with pytest.raises(ValueError, match="saves no row constants"):
        rowwise.call(ksm.SOFTMAX, (x,), (), ksm.softmax_plans, None, "", save=True)


# ----------------------------------------------------------------------------------------------
# plans (pure Python)

def test_cooperative_candidates_staged_where_shared_memory_fits(monkeypatch):
    # As on an H100 (132 SMs, 227 KiB a program): every cooperative shape is also staged 2 deep
    # (not its prefetching copy), except where the buffers of its programs per SM do not fit --
    # softmax_backward stages two inputs, which fits at 1-2 programs an SM (8192 and 4096 at 16 warps)
    # and not at 4; in bf16, half the bytes, 4096-column chunks at 4 an SM fit too.
    monkeypatch.setattr(launch_plans, "coop_enabled", lambda device: True)
    monkeypatch.setattr(launch_plans, "num_sms", lambda device: 132)
    def staged(cands):
        return [p for p in cands if p.mode == "coop" and p.stages]

    assert len(staged(knorm.layernorm_plans(512, 65536, "cpu"))) == len(launch_plans.COOP_SHAPES)
    assert not any(p.prefetch for p in staged(knorm.layernorm_plans(512, 65536, "cpu")))
    shapes = {(p.block_n, p.num_warps) for p in staged(ksm.softmax_backward_plans(512, 65536, "cpu"))}
    assert shapes == {(8192, 16), (4096, 16)}
    bf16 = {(p.block_n, p.num_warps) for p in staged(ksm.softmax_backward_plans(512, 65536, "cpu", elem_size=2))}
    assert {(4096, 4), (4096, 2)} <= bf16
    # the fit itself: 4 programs x (2 stages x 4096 x 4 bytes x 2 inputs + 2 KiB) > 227 KiB
    four = dataclasses.replace(launch_plans.coop_plan(512, 65536, "cpu", 4096, 4, 4), stages=2)
    assert launch_plans.coop_stages_fit(four, "cpu", 4, 1) and not launch_plans.coop_stages_fit(four, "cpu", 4, 2)


def test_row_plans_heuristic():
    assert launch_plans.row_plans(4096, 4096, "cpu")[0].mode == "tile"
    assert launch_plans.row_plans(4096, 16384, "cpu")[0].block_n == 16384
    assert launch_plans.row_plans(4, 65536, "cpu", splits=True)[0].mode == "split"  # few rows: all SMs busy
    assert launch_plans.row_plans(4, 65536, "cpu")[0].mode == "loop"  # (the row-wise ops have no split plans)
    assert launch_plans.row_plans(4096, 65536, "cpu")[0].mode == "loop"  # many rows: two passes each
    # no cooperative plans where programs run one after another
    assert "coop" not in {p.mode for p in launch_plans.row_plans(4096, 65536, "cpu")}
    coop = launch_plans.coop_plan(4096, 65536, "cpu", 8192, 16, 2)  # 4 "SMs" x 2 programs: one row at a time
    assert (coop.splits, coop.grid) == (8, 8)
    # its register cap lets two 16-warp programs share an SM's 65536 registers
    assert launch_plans.coop_launch_args(coop, "cpu") == dict(BLOCK_S=8, PREFETCH=False, WARPS=16, STAGES=1,
                                                    launch_cooperative_grid=True, maxnreg=64)
    staged = launch_plans.coop_plan(4096, 65536, "cpu", 8192, 16, 2, stages=2)  # the next rounds through shared memory
    assert launch_plans.coop_launch_args(staged, "cpu")["STAGES"] == 2 and "pipelined 2 deep" in staged.describe()
    with pytest.raises(ValueError, match="not both"):
        launch_plans.coop_plan(4096, 65536, "cpu", 8192, 16, 2, prefetch=True, stages=2)
    assert launch_plans.coop_launch_args(launch_plans.coop_plan(64, 32768, "cpu", 8192, 16, 1), "cpu")["maxnreg"] == 128
    p = launch_plans.row_plans(65536, 128, "cpu")[0]
    assert p.block_m * p.block_n == 4096 and p.num_warps == 8
    assert launch_plans.split_plan(65536, 4096).splits == 16
    # layernorm's tiles also come with weight and bias loaded early, where that cannot spill
    plain = launch_plans.row_plans(512, 8192, "cpu")
    early = [p for p in launch_plans.row_plans(512, 8192, "cpu", tile_prefetch=True) if p.prefetch]
    assert not any(p.prefetch for p in plain) and early
    assert all(p.block_m * p.block_n <= 16 * 32 * p.num_warps for p in early)
    assert {dataclasses.replace(p, prefetch=False) for p in early} <= set(plain)


def test_vector_align():
    assert launch_plans.vector_align(4, 5000, 5000) == 4  # 16-byte vectors of fp32
    assert launch_plans.vector_align(2, 5000, 5000) == 8  # of fp16
    assert launch_plans.vector_align(4, 1030, 1030) == 2
    assert launch_plans.vector_align(4, 4096, 4109) == 1  # a padded row stride
    assert launch_plans.vector_align(1, 64) == 16


@gpu
@pytest.mark.parametrize("shape, dtype", [((300, 70000), torch.float32), ((7, 20000), torch.bfloat16)],
                         ids=["300x70000-fp32", "7x20000-bf16"])
@pytest.mark.parametrize("name", TWO_PASS)
def test_gpu_cooperative_and_streamed_plans(name, shape, dtype):
    # Every cooperative, streamed and re-reading plan the autotuner may choose, forced: programs
    # of a row on different SMs exchanging partials; persistent programs taking several rows each, in
    # big steps (300 rows: several rounds; 70000 and 20000 columns: the last chunk ragged).  Every
    # cooperative plan fits (its register cap, launch_plans.coop_launch_args).
    args = inputs(name, shape, dtype, seed=4)
    cands = [p for p in PLANS[name](*shape, DEVICE, max_onchip=1024, elem_size=args[0].element_size())
             if p.mode in ("coop", "stream", "reread")]
    assert any(p.mode == "coop" for p in cands)
    for plan in cands:
        checked(name, IMPL[name](*args, plan=plan), args, plan)


@gpu
@pytest.mark.parametrize("shape", [(300, 16384), (7, 20000), (130, 4100)], ids=["300x16384", "7x20000", "130x4100"])
def test_gpu_one_reduction_tiles(shape):
    # every one-reduction tile the tuner may choose, bf16 (a 16-byte vector is 8 columns), rows of -inf
    (x,) = inputs("softmax", shape, torch.bfloat16, seed=9)
    x[0, :] = float("-inf")
    x[0, 11] = 2.0
    x[1, :4000] = float("-inf")
    for name, plans_for, impl in [("softmax", ksm.softmax_plans, ksm.softmax_impl),
                                  ("double_softmax", ksm.double_softmax_plans, ksm.double_softmax_impl)]:
        cands = [p for p in plans_for(*shape, DEVICE) if p.one_reduction]
        assert cands
        for plan in cands:
            checked(name, impl(x, plan=plan), (x,), plan)


@gpu
@pytest.mark.parametrize("shape", [(1000, 65536), (300, 70000)], ids=["1000x65536", "300x70000"])
@pytest.mark.parametrize("name", TWO_PASS)
def test_gpu_cooperative_exchange_repeated(name, shape):
    # The exchange between the programs of a row is a race if it is wrong (a warp going on with a
    # stale copy of the partials shows in a few rows of a few calls): each cooperative plan three
    # times on new inputs, every element checked (on the GPU, against one reference per input).
    case = get_case(name)
    atol, rtol = case.tolerance(torch.float32)
    cands = [p for p in PLANS[name](*shape, DEVICE) if p.mode == "coop"]
    # each with and without the prefetch, and staged where that fits
    assert sum(not p.stages for p in cands) == 2 * len(launch_plans.COOP_SHAPES) and any(p.stages for p in cands)
    for seed in range(3):
        args = inputs(name, shape, torch.float32, seed=10 + seed)
        ref = case.run_reference(args).to(args[0].device)
        bound = atol * ref.abs().max() + rtol * ref.abs()
        for plan in cands:
            bad = int(((IMPL[name](*args, plan=plan).double() - ref).abs() > bound).sum())
            assert bad == 0, f"{plan.describe()}, seed {10 + seed}: {bad} elements out of tolerance"
