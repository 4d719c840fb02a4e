"""softmax and layernorm in the training modes: our autograd Functions and the layernorm backward
kernels (rows on chip and the long-row pair) under Triton's interpreter on odd shapes, against
float64 PyTorch; and every implementation's cells in every mode."""
import itertools

import pytest
import torch
import torch.nn.functional as F

from fusebench.cases import get_case
from fusebench.kernels import layernorm_backward as klnb
from fusebench.kernels import norms as knorm, launch_plans
from fusebench.kernels import rmsnorm as krms
from fusebench.kernels import softmax_autograd as ksa
from fusebench.runner.cell import measure_cell
from fusebench.runner.plan import Cell
from kernel_checks import FAST_TIMING, close, grads

pytestmark = pytest.mark.interpreter  # CPU tensors, but for the GPU test


@pytest.mark.parametrize("shape", [(5, 37), (3, 1000)])
def test_softmax_forward_and_backward(shape):
    g = torch.Generator().manual_seed(shape[1])
    x, dy = torch.randn(shape, generator=g) * 3, torch.randn(shape, generator=g)
    (y,), (dx,) = grads(ksa.softmax, (x,), dy)
    (yr,), (dxr,) = grads(lambda a: torch.softmax(a, 1), (x.double(),), dy.double())
    close(y, yr)
    close(dx, dxr)


def _layernorm_grads(M, N, seed=None, **kw):
    g = torch.Generator().manual_seed(M * N if seed is None else seed)
    # a large mean: the statistics must not lose the variance to it
    x = torch.randn(M, N, generator=g) * 2 + 30
    w, dy = torch.randn(N, generator=g), torch.randn(M, N, generator=g)
    dx, dw, db = klnb.layernorm_backward(dy, x, w, **kw)
    _, (dxr, dwr, dbr) = grads(lambda a, b, c: F.layer_norm(a, (N,), b, c, klnb.LAYERNORM_EPS),
                                (x.double(), w.double(), torch.zeros(N, dtype=torch.float64)), dy.double())
    return (dx, dw, db), (dxr, dwr, dbr)


@pytest.mark.parametrize("shape", [(1, 1), (5, 37), (33, 300)])
@pytest.mark.parametrize("max_onchip", [16384, 16])  # rows on chip; the long-row kernels (ragged chunks)
def test_layernorm_backward_kernels(shape, max_onchip):
    got, want = _layernorm_grads(*shape, max_onchip=max_onchip)
    for a, b in zip(got, want):
        close(a, b, tol=1e-4)


@pytest.mark.parametrize("programs", [1, 7])  # one program for all rows; rows past M in the last
def test_layernorm_backward_partials_over_programs(programs):
    for max_onchip in (16384, 16):  # the long-row kernels: row groups of the column kernel
        got, want = _layernorm_grads(29, 50, max_onchip=max_onchip, programs=programs * 4)
        for a, b in zip(got, want):
            close(a, b, tol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("max_onchip", [16384, 16])
def test_layernorm_backward_keeps_a_plan_per_key(max_onchip):
    klnb._PLANS.clear()
    for seed, M in enumerate((33, 33, 12)):  # new tensors of the same key, then another key
        got, want = _layernorm_grads(M, 300, seed, max_onchip=max_onchip)
        for a, b in zip(got, want):
            close(a, b, tol=1e-4)
    assert len(klnb._PLANS) == 2


@pytest.mark.parametrize("prefetch", [False, True])
@pytest.mark.parametrize("center", [True, False])  # layernorm, rmsnorm
def test_norm_backward_rows_on_chip_variants(center, prefetch):
    # rows with a mean of 1000 and a spread of 1: sums of x and x^2 in fp32 would lose the
    # variance, sums of x - (the row's first element) keep it; 3 programs over 7 rows, so the
    # last program has rows past M and a prefetch runs past each program's block
    M, N = 7, 301
    g = torch.Generator().manual_seed(N)
    x = torch.randn(M, N, generator=g) + 1000
    w, b, dy, dh = (torch.randn(N, generator=g), torch.randn(N, generator=g), torch.randn(M, N, generator=g),
                    torch.randn(M, N, generator=g))
    got = klnb.norm_backward(dy, x, w, dh, center=center, eps=1e-5, programs=3, prefetch=prefetch)
    if center:
        ref = lambda a, c, d: F.layer_norm(a, (N,), c, d, 1e-5)  # noqa: E731
        _, want = grads(ref, (x.double(), w.double(), b.double()), dy.double())
    else:
        _, want = grads(lambda a, c: F.rms_norm(a, (N,), c, 1e-5), (x.double(), w.double()), dy.double())
    close(got[0], want[0] + dh.double(), tol=1e-4)
    for a, r in zip(got[1:], want[1:]):
        close(a, r, tol=1e-4)
    assert (got[2] is None) == (not center)


def _norm_reference(x, w, dy, dh, center):
    N = x.shape[1]
    if center:
        ref = lambda a, c, d: F.layer_norm(a, (N,), c, d, 1e-5)  # noqa: E731
        _, want = grads(ref, (x.double(), w.double(), torch.zeros(N, dtype=torch.float64, device=x.device)),
                        dy.double())
    else:
        _, want = grads(lambda a, c: F.rms_norm(a, (N,), c, 1e-5), (x.double(), w.double()), dy.double())
    return [want[0] + dh.double()] + want[1:]


COOP_VARIANTS = [klnb.CoopRows(512, 4, 1, stages=2), klnb.CoopRows(512, 4, 2, prefetch=True),
                 klnb.CoopRows(512, 4, 1)]


def _row_stats(x, center=True, eps=1e-5):
    # the forward's statistics, from float64: LayerNorm's [M, 2] (mean, rstd), RMSNorm's [M, 1] rstd
    xd = x.double()
    if not center:
        return (1 / torch.sqrt((xd * xd).mean(1, keepdim=True) + eps)).float()
    return torch.stack([xd.mean(1), 1 / torch.sqrt(xd.var(1, unbiased=False) + eps)], 1).float()


@pytest.mark.parametrize("saved", [False, True], ids=["recomputed", "saved"])
@pytest.mark.parametrize("coop", COOP_VARIANTS)
@pytest.mark.parametrize("center", [True, False])  # layernorm, rmsnorm
def test_norm_backward_cooperative_kernel_in_teams_of_one(center, coop, saved, monkeypatch):
    # The interpreter runs one program at a time, so only a team of one program a row (a chunk
    # of 512 >= 301 columns) can finish; its exchange is the real one.  13 rows over 4 or 8
    # programs: the last round has rows past M, and the prefetch runs past the last row.  With
    # `saved` the forward's statistics are read instead of recomputed (a wrong one changes dx).
    monkeypatch.setattr(klnb.launch_plans, "coop_enabled", lambda device: True)
    klnb._PLANS.clear()
    M, N = 13, 301
    g = torch.Generator().manual_seed(N)
    x = torch.randn(M, N, generator=g) * 3 + (1000 if center else 0)
    w, dy, dh = torch.randn(N, generator=g), torch.randn(M, N, generator=g), torch.randn(M, N, generator=g)
    stats = _row_stats(x, center) if saved else None
    got = klnb.norm_backward(dy, x, w, dh, center=center, eps=1e-5, coop=coop, stats=stats)
    (_, launches), = klnb._PLANS.values()
    assert launches[0].jit_fn is klnb._coop_rows_kernel
    for a, r in zip(got, _norm_reference(x, w, dy, dh, center)):
        close(a, r, tol=1e-4)
    assert (got[2] is None) == (not center)
    if saved:
        bad = klnb.norm_backward(dy, x, w, dh, center=center, eps=1e-5, coop=coop, stats=stats * 1.01)
        assert not torch.allclose(bad[0], got[0], rtol=1e-3, atol=1e-3)


def test_statistics_saved_where_the_cooperative_kernel_reads_them(monkeypatch):
    # on a GPU (here faked) at 8193-65536 columns; RMSNorm's only for 2-byte inputs
    monkeypatch.setattr(klnb.launch_plans, "coop_enabled", lambda device: True)
    bf16, fp32 = torch.bfloat16, torch.float32
    for (n, dtype, center), want in [((16384, fp32, True), True), ((16384, bf16, False), True),
                                     ((16384, fp32, False), False), ((8192, bf16, True), False),
                                     ((65537, bf16, True), False)]:
        assert klnb.reads_saved_stats(torch.empty(2, n, dtype=dtype), center) is want
    assert not klnb.reads_saved_stats(torch.empty(2, 3, 16384), True)


def test_norm_backward_refuses_statistics_it_cannot_use():
    x, dy, w = torch.randn(4, 8), torch.randn(4, 8), torch.randn(8)
    for center, stats in ((False, torch.zeros(4, 2)), (True, torch.zeros(4, 3)), (True, torch.zeros(2, 4).t())):
        with pytest.raises(ValueError, match="stats"):
            klnb.norm_backward(dy, x, w, center=center, eps=1e-5, stats=stats)


def test_norm_backward_cooperative_only_where_cooperative_launches_run(monkeypatch):
    # rows of 8193-65536 columns on a GPU; a forced launch shape is ignored where cooperative
    # launches cannot run (the interpreter, FUSEBENCH_COOP=0): the rows-on-chip kernel then
    assert [klnb._coop_rows(n, "cpu") for n in (8192, 8193, 65536)] == [False] * 3
    monkeypatch.setattr(klnb.launch_plans, "coop_enabled", lambda device: True)
    assert [klnb._coop_rows(n, "cpu") for n in (8192, 8193, 65536, 65537)] == [False, True, True, False]
    # chunks of 512 (fp32: 1024) to 2048 columns, at most 32 a row, at 16 warps an SM
    widths = (8193, 16384, 16385, 32768, 32769, 65536)
    bf16, fp32 = ([(c.chunk, c.warps, c.per_sm) for c in (klnb.coop_rows(n, size) for n in widths)] for size in (2, 4))
    assert bf16 == [(512, 1, 16)] * 2 + [(1024, 2, 8)] * 2 + [(2048, 4, 4)] * 2
    assert fp32 == [(1024, 2, 8)] * 4 + [(2048, 4, 4)] * 2
    monkeypatch.undo()
    klnb._PLANS.clear()
    g = torch.Generator().manual_seed(37)
    x, w, dy, dh = torch.randn(5, 37, generator=g), torch.randn(37, generator=g), torch.randn(5, 37, generator=g), \
        torch.randn(5, 37, generator=g)
    got = klnb.norm_backward(dy, x, w, dh, center=True, eps=1e-5, coop=klnb.CoopRows(64, 4, 1, stages=2))
    for a, b in zip(got, _norm_reference(x, w, dy, dh, True)):
        close(a, b, tol=1e-4)
    (_, launches), = klnb._PLANS.values()
    assert launches[0].jit_fn is klnb._rows_kernel


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(7, 16384), (300, 9000), (129, 40000)])
@pytest.mark.parametrize("center", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norm_backward_cooperative_teams_on_gpu(shape, center, dtype):
    # Teams of 5-40 programs a row, ragged last chunks (9000, 40000 columns), rows past M in the
    # last round.
    M, N = shape
    g = torch.Generator(device="cuda").manual_seed(N)
    x = torch.randn(M, N, generator=g, device="cuda") * 2 + 30
    w, dy, dh = (torch.randn(N, generator=g, device="cuda"), torch.randn(M, N, generator=g, device="cuda"),
                 torch.randn(M, N, generator=g, device="cuda"))
    x, w, dy, dh = (t.to(dtype) for t in (x, w, dy, dh))
    want = _norm_reference(x, w, dy, dh, center)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    # the heuristic's launch, the other chunk and the other way to load ahead, recomputing and
    # reading the statistics
    chunk = klnb.coop_rows(N, x.element_size()).chunk
    other = klnb.CoopRows(2048, 4, 4, stages=2) if chunk < 2048 else klnb.CoopRows(1024, 2, 8, stages=2)
    saved = _row_stats(x, center)
    for coop, stats in itertools.product([None, other, klnb.CoopRows(prefetch=True)], [None, saved]):
        kernels = []
        got = klnb.norm_backward(dy, x, w, dh, center=center, eps=1e-5, coop=coop, stats=stats, kernels=kernels)
        assert kernels[0].name == "_coop_rows_kernel"
        for a, r in zip(got, want):
            close(a, r, tol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_db", [True, False])
def test_weight_gradient_partials_summed_in_one_kernel(dtype, with_db):
    # 70 partial rows: a full block of SUM_BLOCK_P and a ragged one; 45 columns: a ragged block
    g = torch.Generator().manual_seed(70)
    dw, db = torch.randn(70, 45, generator=g), torch.randn(70, 45, generator=g)
    total, _ = klnb._sum_plan(70, 45, with_db, dw.device)
    gw = torch.full((45,), float("nan"), dtype=dtype)
    gb = torch.full((45,), float("nan"), dtype=dtype) if with_db else None
    total(dw, db if with_db else dw, gw, gb if with_db else gw)
    # bf16: within one rounding of the float64 sum (torch's default bf16 tolerance)
    tol = {} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(gw, dw.double().sum(0).to(dtype), **tol)
    if with_db:
        torch.testing.assert_close(gb, db.double().sum(0).to(dtype), **tol)


def test_layernorm_autograd_gives_every_gradient():
    N = 40
    x, w, b, dy = torch.randn(6, N), torch.randn(N), torch.randn(N), torch.randn(6, N)
    (y,), got = grads(knorm.layer_norm, (x, w, b), dy)
    (yr,), refs = grads(lambda *a: F.layer_norm(a[0], (N,), a[1], a[2], klnb.LAYERNORM_EPS),
                      (x.double(), w.double(), b.double()), dy.double())
    close(y, yr)
    for a, r in zip(got, refs):
        close(a, r, tol=1e-4)


@pytest.mark.parametrize("mode", ["tile", "loop", "stream", "coop"])
def test_rmsnorm_forward_saves_row_rstd(mode):
    # save=True: the output as without it, and each row's rstd; the tile's second program has
    # rows past M.
    x, w = torch.randn(5, 700) * 3, torch.randn(700)
    plan = {"loop": launch_plans.loop_plan(64, 4), "stream": launch_plans.RowPlan("stream", 1, 256, 4, grid=2),
            "coop": launch_plans.RowPlan("coop", 1, 1024, 4, splits=1, grid=2)}.get(mode) or launch_plans.RowPlan("tile", 4, 1024, 4)
    (y, stats), ran = krms.rmsnorm_run(x, w, plan=plan, save=True)
    assert ran == plan and stats.shape == (5, 1)
    torch.testing.assert_close(y, krms.rmsnorm_run(x, w, plan=plan)[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stats, _row_stats(x, False, krms.RMSNORM_EPS), rtol=1e-5, atol=1e-5)


def test_rmsnorm_autograd_saves_rstd_where_the_backward_reads_it(monkeypatch):
    seen = []
    real = krms.rmsnorm_backward
    monkeypatch.setattr(krms, "rmsnorm_backward", lambda *a, **k: seen.append(k["stats"]) or real(*a, **k))
    N = 40
    x, w, dy = torch.randn(6, N), torch.randn(N), torch.randn(6, N)
    for reads in (True, False):
        monkeypatch.setattr(klnb, "reads_saved_stats", lambda x, center: reads)
        _, got = grads(lambda a, c: krms.RMSNorm.apply(a, c), (x, w), dy)
        _, refs = grads(lambda a, c: F.rms_norm(a, (N,), c, krms.RMSNORM_EPS), (x.double(), w.double()), dy.double())
        for a, r in zip(got, refs):
            close(a, r, tol=1e-4)
    assert seen[1] is None
    torch.testing.assert_close(seen[0], _row_stats(x, False, krms.RMSNORM_EPS), rtol=1e-5, atol=1e-5)


def test_layernorm_autograd_saves_statistics_where_the_backward_reads_them(monkeypatch):
    # Where the backward takes the cooperative kernel (here forced), the forward saves each row's
    # mean and rstd and the backward gets them; elsewhere it saves none.
    seen = []
    real = klnb.layernorm_backward
    monkeypatch.setattr(klnb, "layernorm_backward", lambda *a, **k: seen.append(k["stats"]) or real(*a, **k))
    N = 40
    x, w, b, dy = torch.randn(6, N) + 50, torch.randn(N), torch.randn(N), torch.randn(6, N)
    for reads in (True, False):
        monkeypatch.setattr(klnb, "reads_saved_stats", lambda x, center: reads)
        _, got = grads(knorm.layer_norm, (x, w, b), dy)
        _, refs = grads(lambda *a: F.layer_norm(a[0], (N,), a[1], a[2], klnb.LAYERNORM_EPS),
                        (x.double(), w.double(), b.double()), dy.double())
        for a, r in zip(got, refs):
            close(a, r, tol=1e-4)
    assert seen[1] is None
    torch.testing.assert_close(seen[0], _row_stats(x), rtol=1e-5, atol=1e-5)


def test_backward_models():
    fp32 = torch.float32
    sm, ln = get_case("softmax"), get_case("layernorm")
    assert sm.backward_bytes_model((4, 8), fp32) == 3 * 32 * 4  # read y, dy; write dx
    assert ln.backward_bytes_model((4, 8), fp32) == (3 * 32 + 3 * 8) * 4  # x, dy, w; dx, dw, db
    assert sm.grad_inputs == (0,) and ln.grad_inputs == (0, 1, 2)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["softmax", "layernorm"])
@pytest.mark.parametrize("impl", ["eager", "triton"])
@pytest.mark.parametrize("mode", ["fwd", "bwd", "fwd_bwd"])
def test_cells_in_every_mode(case, impl, mode):
    row = measure_cell(Cell(case, impl, (9, 301), "fp32", "cpu", mode), FAST_TIMING)
    assert row["status"] == "ok", row.get("reason")
    assert row["seeds"] == 3 and row["tol_ratio"] <= 1


@pytest.mark.parametrize("case", ["softmax", "layernorm"])
def test_inductor_cells_in_training_modes(case):
    row = measure_cell(Cell(case, "inductor", (9, 301), "fp32", "cpu", "fwd_bwd"), FAST_TIMING)
    assert row["status"] == "ok", row.get("reason")
    assert row["tol_ratio"] <= 1


def test_a_wrong_layernorm_gradient_fails_the_cell(monkeypatch):
    # dbias off by its sign: the cell must end as a mismatch naming the gradient
    real = klnb.layernorm_backward

    def wrong(dy, x, weight, **kw):
        dx, dw, db = real(dy, x, weight, **kw)
        return dx, dw, -db

    monkeypatch.setattr(klnb, "layernorm_backward", wrong)
    row = measure_cell(Cell("layernorm", "triton", (9, 40), "fp32", "cpu", "fwd_bwd"), FAST_TIMING)
    assert row["status"] == "mismatch" and "gradient of input 2" in row["reason"]
