"""The training cases: definitions against independent formulas, byte models, shapes, and their
eager and Inductor cells in every mode on small CPU shapes."""
import pytest
import torch

from fusebench.cases import get_case
from fusebench.measure.timing import TimingSettings
from fusebench.runner.cell import measure_cell
from fusebench.runner.plan import Cell

FAST = TimingSettings(warmup_ms=1, rep_ms=2, min_reps=2, max_reps=3)
TRAINING = ("rmsnorm", "add_rmsnorm", "swiglu", "cross_entropy")


def _rms(h, w, eps=1e-6):
    return h / torch.sqrt((h * h).mean(1, keepdim=True) + eps) * w


def test_definitions_match_the_formulas():
    x, w = get_case("rmsnorm").make_inputs((5, 7), torch.float64, "cpu", 0)
    torch.testing.assert_close(get_case("rmsnorm").fn(x, w), _rms(x, w))
    x, r, w = get_case("add_rmsnorm").make_inputs((5, 7), torch.float64, "cpu", 0)
    h, y = get_case("add_rmsnorm").fn(x, r, w)
    torch.testing.assert_close(h, x + r)
    torch.testing.assert_close(y, _rms(x + r, w))
    a, b = get_case("swiglu").make_inputs((5, 7), torch.float64, "cpu", 0)
    torch.testing.assert_close(get_case("swiglu").fn(a, b), a / (1 + torch.exp(-a)) * b)
    logits, t = get_case("cross_entropy").make_inputs((5, 7), torch.float64, "cpu", 0)
    assert t.dtype == torch.int64 and int(t.min()) >= 0 and int(t.max()) < 7
    want = (torch.logsumexp(logits, 1) - logits[torch.arange(5), t]).mean()
    torch.testing.assert_close(get_case("cross_entropy").fn(logits, t), want)


def test_cases_are_differentiable_memory_bound_and_out_of_the_cpu_default_run():
    for name in TRAINING:
        case = get_case(name)
        assert case.differentiable and case.memory_bound and not case.cpu_default
        assert case.backward_bytes_model is not None and case.backward_flops_model is not None
        for shape in case.quick_shapes + case.cpu_shapes + case.grid_shapes[:3]:
            case.check_shape(shape)
    assert get_case("add_rmsnorm").grad_inputs == (0, 1, 2)
    assert get_case("cross_entropy").grad_inputs == (0,)  # the targets are integers


def test_shapes_of_real_models():
    rms = get_case("rmsnorm").grid_shapes
    assert (65536, 16384) in rms and (1024, 2048) in rms and (128, 128) in rms  # models and the 2-D grid
    ce = get_case("cross_entropy").grid_shapes
    assert (16384, 256000) in ce and (1024, 32000) in ce


def test_byte_models():
    s, bf = (8, 16), torch.bfloat16
    assert get_case("rmsnorm").min_bytes(s, bf) == 2 * 128 * 2 + 16 * 2
    assert get_case("rmsnorm").backward_bytes_model(s, bf) == 3 * 128 * 2 + 2 * 16 * 2
    assert get_case("add_rmsnorm").min_bytes(s, bf) == 4 * 128 * 2 + 16 * 2
    assert get_case("cross_entropy").min_bytes(s, bf) == 128 * 2 + 8 * 8 + 2
    assert get_case("cross_entropy").backward_bytes_model(s, bf) == 2 * 128 * 2 + 8 * 8


@pytest.mark.slow
@pytest.mark.parametrize("name", TRAINING)
@pytest.mark.parametrize("mode", ["fwd", "bwd", "fwd_bwd"])
def test_eager_in_every_mode(name, mode):
    shape = get_case(name).cpu_shapes[-1]  # the odd one
    row = measure_cell(Cell(name, "eager", shape, "bf16", "cpu", mode), FAST)
    assert row["status"] == "ok", row.get("reason")
    assert row["seeds"] == 3 and row["dtype"] == "fp32" and row["tol_ratio"] <= 1


@pytest.mark.parametrize("name", TRAINING)
def test_inductor_fwd_bwd(name):
    row = measure_cell(Cell(name, "inductor", (16, 40), "fp32", "cpu", "fwd_bwd"), FAST)
    assert row["status"] == "ok", row.get("reason")
    assert row["graphs"] >= 1
