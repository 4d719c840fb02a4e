"""An audit in the terminal: what a person needs, labelled honestly, and names printed as text."""
import io

from rich.console import Console

from audit_fixtures import synthetic_audit
from fusebench.audit import views
from fusebench.audit.render import bar, render, render_pair


def text_of(fn, *args, **kwargs) -> str:
    console = Console(width=400, record=True, color_system=None, file=io.StringIO())
    fn(*args, console, **kwargs)
    return console.export_text()


def test_the_audit_shows_steps_classes_opportunities_outside_kernels_and_notes():
    result = synthetic_audit(backends=("eager", "inductor", "inductor-max-autotune"),
                             failed={"inductor-max-autotune": "oom"})
    text = text_of(render, result, run_id=7, device_name="NVIDIA H100 80GB HBM3")
    assert "audit of tiny-llama · fwd_bwd · bf16 · batch=1 tokens=128 · NVIDIA H100 80GB HBM3 · run 7" in text
    assert "eager (baseline)" in text and "1.25×" in text  # 500 µs / 400 µs
    assert "300,000 steps" in text  # break-even
    assert "gemm 62%" in text  # 300 of the 480 µs profiled step
    assert "ideal (estimate)" in text and "an estimate" in text
    # ranked by gap: the rmsnorm-like region (28.6 µs) before the swiglu-like one (27.9 µs)
    assert text.index("rmsnorm-like") < text.index("swiglu-like")
    assert "rmsnorm 128x4096 fwd: triton 2.1 µs, liger 2.4 µs, quack: not installed" in text
    assert "node too large for one reduction" in text
    assert "aten::add_" in text and "gradient accumulation (AccumulateGrad)" in text
    assert "inductor-max-autotune: oom: CUDA out of memory" in text  # the failed backend, with why
    assert "ceilings measured at the audit's start" in text


def test_top_limits_the_opportunities():
    text = text_of(render, synthetic_audit(), top=1)
    assert "rmsnorm-like" in text and "swiglu-like" not in text and "the top 1 by gap" in text


def test_without_a_copy_ceiling_ideal_times_are_not_available():
    text = text_of(render, synthetic_audit(copy_gbps=None))
    assert "copy ceiling not available" in text
    assert "not available" in text and "gaps not available" in text
    assert "an estimate" not in text  # no estimate was made, so none is explained


def test_names_from_a_model_print_as_text_not_markup():
    result = synthetic_audit()
    result.regions[0].label = "[red]odd[/red] region"
    result.kernels[-1].name = "kernel[/]"
    text = text_of(render, result)
    assert "[red]odd[/red] region" in text and "kernel[/]" in text


def test_cpu_audits_say_host_time():
    text = text_of(render, synthetic_audit(device="cpu"))
    assert "host time per step" in text and "GPU time" not in text


def test_bar_cells_add_up_to_the_width():
    parts = [("gemm", 62.0), ("memory", 21.0), ("copy", 2.0), (views.BETWEEN, 15.0)]
    for width in (1, 7, 40):
        assert len(bar(parts, 100.0, width).plain) == width
    assert bar(parts, 0.0, 40).plain == ""


def test_two_audits_side_by_side():
    a = synthetic_audit()
    b = synthetic_audit(scale=0.8)
    text = text_of(render_pair, a, b, run_a=3, run_b=4)
    assert "A: audit of tiny-llama" in text and "B: audit of tiny-llama" in text
    assert "400 µs" in text and "320 µs" in text and "1.25×" in text
    assert "regions of inductor" in text and "rmsnorm-like" in text


def test_pairing_two_compile_modes_measured_apart():
    a = synthetic_audit(backends=("eager", "inductor"))
    b = synthetic_audit(backends=("eager", "inductor-max-autotune"))
    pairs = views.pair_backends(a, b)
    assert [(p.a, p.b) for p in pairs] == [("eager", "eager"), ("inductor", "inductor-max-autotune")]
    assert all(r.a is not None and r.b is not None for r in pairs[1].regions)


def test_alike_regions_match_in_order_and_unmatched_ones_stay():
    a = synthetic_audit()
    b = synthetic_audit()
    twin = views.RegionRow(**{**a.regions[0].__dict__, "index": 5, "time_us": 9.0, "gap_us": 7.0})
    a.regions.append(twin)
    pairs = views.match_regions(a, "inductor", b, "inductor")
    assert len(pairs) == 3
    extra = [p for p in pairs if p.occurrence == 1]
    assert len(extra) == 1 and extra[0].a.time_us == 9.0 and extra[0].b is None
    matched = [p for p in pairs if p.a is not None and p.b is not None]
    assert all(p.change == 1.0 for p in matched)


def test_formats():
    assert views.fmt_us(0.5) == "500 ns" and views.fmt_us(41.23) == "41.2 µs" and views.fmt_us(5800) == "5.8 ms"
    assert views.fmt_us(None) == "—" and views.fmt_bytes(3 << 20) == "3 MiB"
    assert views.kernel_list(["a", "a", "b"]) == "3: 2× a, b"


def test_long_refusals_are_cut_and_counted():
    text = views.refusals_text(["x" * 300, "short", "third"], limit=2, width=50)
    assert text == "x" * 49 + "…; short; … 1 more"


def test_without_ideal_times_regions_rank_by_measured_time():
    result = synthetic_audit(copy_gbps=None)
    result.regions[1].time_us = 50.0
    assert [r.label.split("-")[0] for r in views.ranked(result, "inductor")] == ["swiglu", "rmsnorm"]
    result = synthetic_audit()
    assert [r.label.split("-")[0] for r in views.ranked(result, "inductor")] == ["rmsnorm", "swiglu"]
