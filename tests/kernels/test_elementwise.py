"""The horizontal kernels (two consumers of one input, one read) and the element-wise kernels:
every plan shape on odd sizes, layouts, and their candidate lists."""
import dataclasses

import pytest
import torch

from fusebench.cases.base import get_case
from fusebench.kernels import launch_plans
import fusebench.kernels.horizontal as khor
import fusebench.kernels.pointwise as kpw
from kernel_checks import DEVICE, HORIZONTAL, IMPL, LONG_PLANS, ON_GPU, check, check_plan, inputs, strided

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


HORIZONTAL_PLANS = {
    **LONG_PLANS,
    "split": launch_plans.split_plan(700, 64),  # 11 programs per row, the last one ragged
    "split_evict_first": dataclasses.replace(launch_plans.split_plan(700, 64), evict_first=True),
    # several rows side by side in the looped plans
    "loop_rows": launch_plans.loop_plan(64, 4, rows=2),  # 3 rows: the second group is ragged
    "loop_rows_pipelined": launch_plans.loop_plan(128, 4, rows=4, grid=1, stages=2),
    "loop_evict_first": dataclasses.replace(launch_plans.loop_plan(64, 4), evict_first=True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("mode", list(HORIZONTAL_PLANS))
@pytest.mark.parametrize("name", HORIZONTAL)
def test_horizontal_long_row_plans(name, mode, dtype):
    check_plan(name, HORIZONTAL_PLANS[mode], dtype)


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


def test_split_counters_are_reset():
    # The split horizontal kernel's last program per row resets its counter: calls repeat.
    (a,) = inputs("horizontal_reduction_reduction", (5, 700), torch.float32, seed=7)
    first = khor.horizontal_reduction_reduction_impl(a, plan=HORIZONTAL_PLANS["split"])
    again = khor.horizontal_reduction_reduction_impl(a, plan=HORIZONTAL_PLANS["split"])
    check("horizontal_reduction_reduction", again, (a,))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert int(launch_plans.zeroed_counters(a.device, 5)[:5].abs().sum()) == 0


@pytest.mark.parametrize("plan", kpw.TRANSPOSED_PLANS[:2] + kpw.TRANSPOSED_SMALL_PLANS,
                         ids=lambda p: f"{p.block_m}x{p.block_n}")
def test_transposed_output_is_row_major(plan):
    args = inputs("bias_dropout_add_transposed", (70, 130), torch.float32)
    out = kpw.bias_dropout_add_transposed_impl(*args, plan=plan)
    assert out.is_contiguous()
    check("bias_dropout_add_transposed", out, args)


@pytest.mark.parametrize("shape", [(70, 130), (33, 257)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("plan", kpw.TRANSPOSED_COLUMN_MAJOR_PLANS + [launch_plans.TilePlan(16, 32, 4, group_m=3, out_t=True)],
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
    out = kpw.bias_dropout_add_transposed_impl(*args, plan=launch_plans.TilePlan(16, 32, 4, group_m=group_m))
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
    check(name, IMPL[name](*args, plan=launch_plans.TilePlan(8, 16, 4)), args)


def test_gelu_saturates():
    # exp overflow / underflow in the sigmoid form gives exactly x and 0 for large |x|.
    inp = torch.tensor([[-60.0, -12.0, 0.0, 12.0, 60.0]], device=DEVICE)
    out = kpw.bias_gelu_impl(inp, torch.zeros(5, device=DEVICE))
    ref = get_case("bias_gelu").run_reference((inp, torch.zeros(5, device=DEVICE)))
    assert torch.isfinite(out).all()
    assert torch.allclose(out.double().cpu(), ref.cpu(), atol=1e-6, rtol=1e-6)


def test_tile_2d_plans():
    assert launch_plans.tile_2d_plans(1, 10**6)[0] == launch_plans.TilePlan(1, 8192, 16)
    assert launch_plans.tile_2d_plans(65536, 128)[0] == launch_plans.TilePlan(64, 128, 16)
    assert launch_plans.tile_2d_plans(3, 5)[0].block_m == 4
    # a small tensor: only small tiles (most programs), not one program holding it all
    assert launch_plans.tile_2d_plans(1, 16384, min_programs=132) == [launch_plans.TilePlan(1, n, 4) for n in (1024, 512, 256, 128)]
    assert len(launch_plans.tile_2d_plans(1, 2**24, min_programs=132)) == 4
    # one spread tile left (256 programs of 1024): the smaller ones join it
    assert launch_plans.tile_2d_plans(1, 2**18, min_programs=132) == [launch_plans.TilePlan(1, n, 4) for n in (1024, 512, 256, 128)]


@pytest.mark.parametrize("plan,kind", [(launch_plans.TilePlan(4, 64, 4), "both"), (launch_plans.TilePlan(4, 256, 4), "rows"),
                                       (launch_plans.TilePlan(64, 64, 4), "cols")])
def test_element_wise_tiles_on_each_grid_kind(plan, kind):
    # _tile's three index paths (2-D grid, programs along rows only, along columns only) on a view
    # with a row stride of 300 and a ragged last tile each way
    x = torch.randn(37, 300, device=DEVICE)[:, :250]
    b, r = torch.randn(37, 250, device=DEVICE), torch.randn(250, 37, device=DEVICE).t()
    assert kpw._grid_kind(*x.shape, plan) == kind
    torch.testing.assert_close(kpw.pointwise_chain_impl(x, plan=plan), get_case("pointwise_chain").fn(x))
    torch.testing.assert_close(kpw.bias_dropout_add_impl(x, b, r, plan=plan),
                               get_case("bias_dropout_add").fn(x, b, r))


def test_element_wise_hinted_candidates_only_for_small_traffic():
    small = kpw.element_wise_plans(1, 2**18, "cpu", traffic=2 << 20)
    assert {p.evict for p in small} == {"", "evict_first", "evict_last"}
    assert {p.evict for p in kpw.element_wise_plans(1, 2**26, "cpu", traffic=512 << 20)} == {""}


@pytest.mark.parametrize("evict", ["evict_first", "evict_last"])
@pytest.mark.parametrize("name", ["pointwise_chain", "bias_gelu", "bias_dropout_add"])
def test_element_wise_hinted_loads(name, evict):
    args = inputs(name, (33, 130), torch.float32, seed=7)
    check(name, IMPL[name](*args, plan=launch_plans.TilePlan(8, 64, 4, evict=evict)), args)
