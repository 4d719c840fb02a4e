"""The fwd, bwd and fwd_bwd modes: planning, the timed call, gradient checks, the store and compare."""
import pytest
import torch
from typer.testing import CliRunner

import fusebench
from fusebench.cases import get_case
from fusebench.impls import base as impl_base
from fusebench.impls.user import UserImplementation
from fusebench.measure.timing import TimingSettings
from fusebench.runner.cell import measure_cell
from fusebench.runner.mode_call import ModeCall
from fusebench.runner.modes import case_in_mode, check_mode
from fusebench.runner.plan import Cell, plan_cells

FAST = TimingSettings(warmup_ms=1, rep_ms=2, min_reps=2, max_reps=5)


def _user(name, fn, cases):
    impl = UserImplementation(name, fn, tuple(cases))
    impl_base._load()
    impl_base._IMPLS[name] = impl
    return impl


@pytest.fixture
def user_impls():
    names = []
    yield lambda name, fn, cases: names.append(name) or _user(name, fn, cases)
    for n in names:
        impl_base._IMPLS.pop(n, None)


def test_unknown_mode_is_refused():
    assert check_mode(None) == "fwd"
    with pytest.raises(ValueError, match="unknown mode 'backward'"):
        check_mode("backward")


def test_training_modes_plan_differentiable_cases_only():
    cells = plan_cells(["rmsnorm", "swiglu"], ["eager", "inductor"], "quick", None, "cpu", "bwd")
    assert cells and {c.mode for c in cells} == {"bwd"}
    assert {c.case for c in cells} == {"rmsnorm", "swiglu"}
    # a case without gradients, named: bad input that names the differentiable ones
    with pytest.raises(ValueError, match="double_softmax: no gradients defined, so no fwd_bwd mode"):
        plan_cells(["double_softmax"], ["eager"], "quick", None, "cpu", "fwd_bwd")
    # all cases: only the differentiable ones are planned
    every = plan_cells(None, ["eager"], "quick", None, "cuda", "fwd_bwd")
    assert {c.case for c in every} == {c.name for c in fusebench.cases.all_cases() if c.differentiable}


def test_cpu_default_run_leaves_the_training_cases_out_unless_named():
    planned = {c.case for c in plan_cells(None, ["eager"], "quick", None, "cpu")}
    assert "rmsnorm" not in planned and "softmax" in planned
    assert {c.case for c in plan_cells(["rmsnorm"], ["eager"], "quick", None, "cpu")} == {"rmsnorm"}


def test_mode_byte_models():
    case = get_case("swiglu")
    s, dt = (4, 8), torch.float32
    assert case_in_mode(case, "fwd").min_bytes(s, dt) == 3 * 32 * 4
    assert case_in_mode(case, "bwd").min_bytes(s, dt) == 5 * 32 * 4
    assert case_in_mode(case, "fwd_bwd").min_bytes(s, dt) == 8 * 32 * 4
    assert case_in_mode(case, "fwd_bwd").flops(s, dt) == case.flops(s, dt) + case.backward_flops_model(s, dt)


def test_bwd_call_runs_the_forward_once_outside_the_timed_calls():
    case = get_case("swiglu")
    calls = []

    def fwd(a, b):
        calls.append(1)
        return torch.nn.functional.silu(a) * b

    args = case.make_inputs((8, 16), torch.float32, "cpu", 0)
    bwd = ModeCall(fwd, case, "bwd")
    bwd.prime(args)
    grads = [bwd(*args) for _ in range(3)]
    assert len(calls) == 1 and len(grads[0]) == 2
    assert torch.equal(grads[0][0], grads[2][0])
    both = ModeCall(fwd, case, "fwd_bwd")
    for _ in range(3):
        both(*args)
    assert len(calls) == 4  # every fwd_bwd call runs the forward


def test_gradients_are_checked_against_float64_autograd():
    case = get_case("swiglu")
    args = case.make_inputs((8, 16), torch.float64, "cpu", 0)
    out, grads = ModeCall(case.fn, case, "fwd_bwd").checked(args, 0)
    ref_out, ref_grads = ModeCall(case.fn, case, "fwd_bwd").reference(args, 0)
    torch.testing.assert_close(out, ref_out)
    a, b = (x.detach().requires_grad_() for x in args)
    y = torch.nn.functional.silu(a) * b
    from fusebench.runner.mode_call import grad_outputs

    dy = grad_outputs([y], 0)[0]
    y.backward(dy)
    torch.testing.assert_close(grads[0], a.grad)
    torch.testing.assert_close(ref_grads[1], b.grad)
    assert not torch.all(dy == 1)  # the outputs' gradients are not ones


@pytest.mark.parametrize("mode", ["bwd", "fwd_bwd"])
def test_eager_cells_in_training_modes(mode):
    row = measure_cell(Cell("rmsnorm", "eager", (64, 96), "fp32", "cpu", mode), FAST)
    assert row["status"] == "ok", row.get("reason")
    assert row["mode"] == mode and row["seeds"] == 3 and row["time_us"] > 0
    case = get_case("rmsnorm")
    want = case_in_mode(case, mode).min_bytes((64, 96), torch.float32)
    assert row["min_bytes"] == want != case.min_bytes((64, 96), torch.float32)


def test_inductor_differentiates_the_joint_graph_in_bwd():
    row = measure_cell(Cell("swiglu", "inductor", (32, 48), "fp32", "cpu", "bwd"), FAST)
    assert row["status"] == "ok", row.get("reason")
    assert row["graphs"] >= 1 and row["recompiles"] == 0


def test_a_wrong_gradient_is_a_mismatch_naming_the_input(user_impls):
    class BadSwiglu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return torch.nn.functional.silu(a) * b

        @staticmethod
        def backward(ctx, dy):
            a, b = ctx.saved_tensors
            return dy * b * torch.sigmoid(a), dy * torch.nn.functional.silu(a)  # da misses a term

    user_impls("bad-swiglu", lambda a, b: BadSwiglu.apply(a, b), ["swiglu"])
    fwd = measure_cell(Cell("swiglu", "bad-swiglu", (16, 32), "fp32", "cpu", "fwd"), FAST)
    assert fwd["status"] == "ok"  # the forward is right
    row = measure_cell(Cell("swiglu", "bad-swiglu", (16, 32), "fp32", "cpu", "bwd"), FAST)
    assert row["status"] == "mismatch" and "gradient of input 0" in row["reason"]


def test_a_non_differentiable_implementation_errors_in_training_modes(user_impls):
    user_impls("detached-swiglu", lambda a, b: (torch.nn.functional.silu(a) * b).detach(), ["swiglu"])
    row = measure_cell(Cell("swiglu", "detached-swiglu", (16, 32), "fp32", "cpu", "fwd_bwd"), FAST)
    assert row["status"] == "error" and "not differentiable" in row["reason"]


def test_run_stores_the_mode_and_compare_refuses_two_modes(db, tmp_path):
    a = fusebench.run(["swiglu"], impls=["eager"], shapes="16x32", db=db, timing=FAST, device="cpu", isolate=False,
                      mode="bwd", metrics="none")
    assert a.attrs["mode"] == "bwd" and (a["mode"] == "bwd").all() and (a.status == "ok").all()
    b = fusebench.run(["swiglu"], impls=["eager"], shapes="16x32", db=db, timing=FAST, device="cpu", isolate=False,
                      metrics="none")
    assert (b["mode"] == "fwd").all()
    from fusebench.report import render_compare
    from fusebench.store import Store

    with Store.open(db, create=False) as store:
        with pytest.raises(ValueError, match="measured bwd and run .* fwd"):
            render_compare(store, a.attrs["run_id"], store, b.attrs["run_id"], str(tmp_path / "c.html"))


def test_cli_mode_option(db):
    from fusebench.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["run", "swiglu", "--impl", "eager", "--shapes", "16x32", "--db", db, "--device", "cpu",
                              "--mode", "sideways", "--no-isolate"])
    assert res.exit_code == 2 and "unknown mode 'sideways'" in res.output
    res = runner.invoke(app, ["run", "swiglu", "--impl", "eager", "--shapes", "16x32", "--db", db, "--device", "cpu",
                              "--mode", "fwd_bwd", "--no-isolate", "--metrics", "none"])
    assert res.exit_code == 0, res.output
    assert "swiglu · fwd_bwd" in res.output
    res = runner.invoke(app, ["run", "--resume", "1", "--mode", "bwd", "--db", db])
    assert res.exit_code == 2


def test_the_forward_mode_calls_fn_and_the_training_modes_train_fn():
    # train_fn (our kernels' autograd.Function) costs autograd's bookkeeping per call: a forward
    # cell times what an inference caller calls
    called = []

    class Both(impl_base.Implementation):
        name = "fn-and-train-fn"

        def applies(self, case):
            return case.name == "swiglu"

        def prepare(self, case, shape, dtype, device):
            def fn(a, b):
                called.append("fn")
                return torch.nn.functional.silu(a) * b

            def train_fn(a, b):
                called.append("train_fn")
                return torch.nn.functional.silu(a) * b

            return impl_base.Prepared(fn=fn, train_fn=train_fn)

    impl_base._load()
    impl_base._IMPLS[Both.name] = Both()
    try:
        for mode, used in (("fwd", "fn"), ("bwd", "train_fn")):
            called.clear()
            row = measure_cell(Cell("swiglu", Both.name, (16, 32), "fp32", "cpu", mode), FAST)
            assert row["status"] == "ok", row.get("reason")
            assert called and set(called) == {used}, (mode, set(called))
    finally:
        impl_base._IMPLS.pop(Both.name, None)
