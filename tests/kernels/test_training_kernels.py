"""Our training kernels (rmsnorm, add_rmsnorm, swiglu, cross_entropy), forward and backward, under
Triton's interpreter on odd shapes, against float64 PyTorch."""
import pytest
import torch
import torch.nn.functional as F

from fusebench.kernels import launch_plans
from fusebench.kernels import cross_entropy as kce
from fusebench.kernels import rmsnorm as krms
from fusebench.kernels import swiglu as ksw
from fusebench.runner.cell import measure_cell
from fusebench.runner.plan import Cell, plan_cells
from kernel_checks import FAST_TIMING, close, grads

pytestmark = pytest.mark.interpreter  # CPU tensors, but for the GPU test at the end

ODD = [(5, 37), (33, 300)]


@pytest.mark.parametrize("shape", ODD)
def test_rmsnorm_forward_and_backward(shape):
    M, N = shape
    g = torch.Generator().manual_seed(M)
    x, w, dy = torch.randn(M, N, generator=g), torch.randn(N, generator=g), torch.randn(M, N, generator=g)
    (y,), (dx, dw) = grads(krms.RMSNorm.apply, (x, w), (dy,))
    (yr,), (dxr, dwr) = grads(lambda a, b: F.rms_norm(a, (N,), b, krms.RMSNORM_EPS), (x.double(), w.double()),
                               (dy.double(),))
    close(y, yr)
    close(dx, dxr)
    close(dw, dwr)


@pytest.mark.parametrize("plan", [launch_plans.loop_plan(64, 4), launch_plans.loop_plan(128, 4, grid=3)])
def test_rmsnorm_looped_rows(plan):
    x, w = torch.randn(7, 301), torch.randn(301)
    close(krms.rmsnorm_impl(x, w, plan=plan), F.rms_norm(x.double(), (301,), w.double(), krms.RMSNORM_EPS))


def test_rmsnorm_backward_partials_over_several_programs():
    x, w, dy = torch.randn(29, 50), torch.randn(50), torch.randn(29, 50)
    dx1, dw1 = krms.rmsnorm_backward(dy, x, w, programs=1)
    dx7, dw7 = krms.rmsnorm_backward(dy, x, w, programs=7)  # rows past M in the last program
    torch.testing.assert_close(dx1, dx7)
    torch.testing.assert_close(dw1, dw7, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("max_onchip", [launch_plans.MAX_ONCHIP, 64])  # one pass, and the long-row path
@pytest.mark.parametrize("shape", ODD)
def test_add_rmsnorm_forward_and_backward(shape, max_onchip):
    M, N = shape
    g = torch.Generator().manual_seed(N)
    x, r, w = torch.randn(M, N, generator=g), torch.randn(M, N, generator=g), torch.randn(N, generator=g)
    dh, dy = torch.randn(M, N, generator=g), torch.randn(M, N, generator=g)
    h, y = krms.add_rmsnorm_impl(x, r, w, max_onchip=max_onchip)
    ref_h = x.double() + r.double()
    close(h, ref_h)
    close(y, F.rms_norm(ref_h, (N,), w.double(), krms.RMSNORM_EPS))
    _, (dx, dr, dw) = grads(krms.AddRMSNorm.apply, (x, r, w), (dh, dy))
    ref = lambda a, b, c: (a + b, F.rms_norm(a + b, (N,), c, krms.RMSNORM_EPS))  # noqa: E731
    _, (dxr, drr, dwr) = grads(ref, (x.double(), r.double(), w.double()), (dh.double(), dy.double()))
    close(dx, dxr)
    close(dr, drr)
    close(dw, dwr)


def test_add_rmsnorm_refuses_a_plan_that_cannot_write_the_sum():
    with pytest.raises(ValueError, match="tile plans only"):
        krms.add_rmsnorm_impl(torch.randn(4, 8), torch.randn(4, 8), torch.randn(8), plan=launch_plans.loop_plan(64, 4))


@pytest.mark.parametrize("shape", [(3, 5), (17, 999)])
def test_swiglu_forward_and_backward(shape):
    g = torch.Generator().manual_seed(1)
    a, b, dy = (torch.randn(shape, generator=g) * 3 for _ in range(3))
    (y,), (da, db) = grads(ksw.SwiGLU.apply, (a, b), (dy,))
    (yr,), (dar, dbr) = grads(lambda p, q: F.silu(p) * q, (a.double(), b.double()), (dy.double(),))
    close(y, yr)
    close(da, dar)
    close(db, dbr)


@pytest.mark.parametrize("shape", [(3, 7), (5, 5003)])  # one chunk; two chunks, the second ragged
def test_cross_entropy_loss_and_gradient(shape):
    M, V = shape
    g = torch.Generator().manual_seed(V)
    logits = torch.randn(M, V, generator=g) * 4
    targets = torch.randint(0, V, (M,), generator=g)
    targets[0] = V - 1  # the last column, in the ragged chunk
    dloss = torch.tensor(0.7)
    leaf = logits.clone().requires_grad_(True)
    loss = kce.CrossEntropy.apply(leaf, targets)
    loss.backward(dloss)
    ref_leaf = logits.double().requires_grad_(True)
    ref = F.cross_entropy(ref_leaf, targets)
    ref.backward(dloss.double())
    close(loss, ref)
    close(leaf.grad, ref_leaf.grad)
    # without a gradient wanted, the forward stores no lse; with one, each row's logsumexp
    loss2, lse2, *_ = kce.cross_entropy_forward(logits, targets)
    assert lse2 is None and torch.equal(loss2, loss.detach())
    _, lse3, *_ = kce.cross_entropy_forward(logits, targets, with_lse=True)
    close(lse3, torch.logsumexp(logits.double(), 1))


def test_cross_entropy_backward_can_run_twice_on_one_graph():
    logits = torch.randn(4, 33).requires_grad_(True)
    loss = kce.CrossEntropy.apply(logits, torch.tensor([0, 32, 5, 7]))
    g1 = torch.autograd.grad(loss, logits, torch.tensor(2.0), retain_graph=True)[0]
    g2 = torch.autograd.grad(loss, logits, torch.tensor(2.0))[0]
    torch.testing.assert_close(g1, g2)


@pytest.mark.parametrize("case", ["rmsnorm", "add_rmsnorm", "swiglu", "cross_entropy"])
@pytest.mark.parametrize("mode", ["fwd", "bwd", "fwd_bwd"])
def test_triton_cells_in_every_mode(case, mode):
    shape = {"swiglu": (9, 33), "cross_entropy": (6, 301)}.get(case, (9, 40))
    row = measure_cell(Cell(case, "triton", shape, "fp32", "cpu", mode), FAST_TIMING)
    assert row["status"] == "ok", row.get("reason")
    assert row["seeds"] == 3 and row["tol_ratio"] <= 1
    assert row["na"]["time"] == "Triton interpreter: correctness only"


def test_triton_is_planned_in_training_modes_only_with_a_backward(monkeypatch):
    from fusebench.kernels.registry import KERNELS

    assert {c.case for c in plan_cells(["swiglu", "rmsnorm"], ["triton"], "quick", None, "cpu", "bwd")} == \
        {"swiglu", "rmsnorm"}
    monkeypatch.setattr(KERNELS["swiglu"], "autograd", None)  # a forward-only kernel
    assert {c.case for c in plan_cells(["swiglu", "rmsnorm"], ["triton"], "quick", None, "cpu", "bwd")} == {"rmsnorm"}
    assert {c.case for c in plan_cells(["swiglu"], ["triton"], "quick", None, "cpu", "fwd")} == {"swiglu"}


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(1, 3), (7, 301), (20, 1000)])
@pytest.mark.parametrize("programs", [None, 3])
def test_rmsnorm_backward_long_row_kernels(shape, programs):
    # max_onchip below the row length: the row-statistics and column-block kernels, ragged chunks,
    # ragged column blocks and row groups
    M, N = shape
    g = torch.Generator().manual_seed(M + N)
    x, w, dy, dh = torch.randn(M, N, generator=g), torch.randn(N, generator=g), torch.randn(M, N, generator=g), \
        torch.randn(M, N, generator=g)
    _, (dxr, dwr) = grads(lambda a, b: F.rms_norm(a, (N,), b, krms.RMSNORM_EPS), (x.double(), w.double()),
                           (dy.double(),))
    for onchip in (launch_plans.MAX_ONCHIP, 2):
        dx, dw = krms.rmsnorm_backward(dy, x, w, programs=programs, max_onchip=onchip)
        close(dx, dxr)
        close(dw, dwr, tol=1e-4)
        dx, _ = krms.rmsnorm_backward(dy, x, w, dh, programs=programs, max_onchip=onchip)
        close(dx, dxr + dh.double())


def test_cross_entropy_chunks_rescale_the_running_sum(monkeypatch):
    # 64-column chunks over 200 columns (the last ragged), the row's max in a later chunk than
    # the first: the running sum must be rescaled when the max grows
    monkeypatch.setattr(kce, "BLOCK_N", 64)
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 200, generator=g)
    logits[0, 150] = 40.0
    logits[1, 199] = 25.0
    targets = torch.tensor([150, 0, 199])
    leaf = logits.clone().requires_grad_(True)
    loss = kce.CrossEntropy.apply(leaf, targets)
    loss.backward()
    ref_leaf = logits.double().requires_grad_(True)
    F.cross_entropy(ref_leaf, targets).backward()
    close(loss, F.cross_entropy(logits.double(), targets))
    close(leaf.grad, ref_leaf.grad)
    assert loss.dtype == torch.float32


@pytest.mark.gpu
@pytest.mark.parametrize("N", [4096, 16384, 32768, 65536])
@pytest.mark.parametrize("center", [True, False])  # layernorm, rmsnorm
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norm_backward_kernels_spill_at_most_a_few_registers(N, center, dtype):
    # rows above 8192 columns take the cooperative kernel, which spills at most a few registers
    # (LayerNorm's 4; a launch that held too much of a row spilled 60-200); no other kernel of the
    # backward, the partial sums' included, spills
    from fusebench.kernels.layernorm_backward import norm_backward

    x = torch.randn(256, N, device="cuda", dtype=dtype)
    dy, w = torch.randn_like(x), torch.randn(N, device="cuda", dtype=dtype)
    kernels = []
    norm_backward(dy, x, w, center=center, eps=1e-5, kernels=kernels)
    assert [k.name for k in kernels] == [
        "_coop_rows_kernel" if N > 8192 else "_rows_kernel", "_sum_partials_kernel"]
    assert [(k.name, k.n_spills) for k in kernels if k.n_spills > (8 if k.name == "_coop_rows_kernel" else 0)] == []
