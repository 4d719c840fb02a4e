"""Metric families: ncu CSV parsing, profiler-trace and generated-code counting, the plumbing of every
family on the CPU (numbers or `na` with a reason, never an exception), the roofline arithmetic
against fake ceilings in a temporary store, and the FLOP cross-check.  GPU tests are marked `gpu`.
"""
from __future__ import annotations

import os

import pytest
import torch

from fusebench.cases import get_case
from fusebench.impls import get_impl
from fusebench.metrics import MetricContext, get_metric

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
FAMILIES = ("kernels", "graph", "memory", "compile", "flops", "roofline", "ncu")
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _ctx(case_name, impl_name, shape, device="cpu", row=None, db_path=None, dtype=torch.float32):
    case, impl = get_case(case_name), get_impl(impl_name)
    shape = case.normalize_shape(tuple(shape))
    prepared = impl.prepare(case, shape, dtype, device)
    args = case.make_inputs(shape, dtype, device, 0)
    with prepared.context(), torch.no_grad():
        prepared.fn(*args)  # warm-up, as the runner's accuracy check does
    base = {"min_bytes": case.min_bytes(shape, dtype), "flops": case.flops(shape, dtype), "time_us": 100.0}
    base.update(row or {})
    return MetricContext(case, impl, prepared, args, shape, dtype, device, base, db_path)


def _run(family, ctx):
    with ctx.prepared.context(), torch.no_grad():
        return get_metric(family)(ctx)


def _check_columns(result: dict):
    """Every value a store column (or na / note), every na a non-empty reason."""
    from fusebench.store import CELL_COLUMNS

    for k, v in result.items():
        if k == "na":
            assert isinstance(v, dict) and v
            assert all(isinstance(r, str) and r for r in v.values()), v
        elif k == "note":
            assert isinstance(v, str) and v
        else:
            assert k in CELL_COLUMNS, k


# ----------------------------------------------------------------------------------------------
# ncu CSV parsing


def test_parse_ncu_sample_file():
    """A log captured on an NVIDIA H200 with Nsight Compute 2025.3.1 (softmax 8192x8192 fp32
    eager, exactly the metric's command line): ==WARNING==/==PROF== lines, NVTX columns
    with doubled quotes, thousands separators, base units (byte, ns, inst)."""
    from fusebench.metrics.ncu import columns_from, parse_ncu_csv

    parsed = parse_ncu_csv(open(os.path.join(DATA, "ncu_sample.csv")).read())
    assert len(parsed["kernels"]) == 1
    assert "cunn_SoftMaxForwardReg" in parsed["kernels"][0]["name"]
    t = parsed["totals"]
    assert t["dram__bytes_read.sum"] == 268_462_336
    assert t["dram__bytes_write.sum"] == 272_243_968
    assert t["smsp__inst_executed.sum"] == 153_853_952
    assert t["gpu__time_duration.sum"] == 277_088  # ns
    assert parsed["units"] == {"dram__bytes_read.sum": "byte", "dram__bytes_write.sum": "byte",
                               "gpu__time_duration.sum": "nsecond", "smsp__inst_executed.sum": "inst"}
    row = columns_from(parsed, min_bytes=2 * 8192 * 8192 * 4)
    assert row["dram_read_bytes"] == 268_462_336 and row["sass_inst"] == 153_853_952
    assert row["ncu_time_us"] == pytest.approx(277.088)
    assert row["traffic_amplification"] == pytest.approx((268_462_336 + 272_243_968) / (2 * 8192 * 8192 * 4))
    assert "na" not in row
    # the analytic 256 MiB each way, within 3% (the check, on this capture)
    assert abs(row["dram_read_bytes"] / 2**28 - 1) < 0.03 and abs(row["dram_write_bytes"] / 2**28 - 1) < 0.03

    inductor = parse_ncu_csv(open(os.path.join(DATA, "ncu_sample_double_softmax_inductor.csv")).read())
    assert [k["name"][:17] for k in inductor["kernels"]] == ["triton_red_fused_"]
    assert inductor["totals"]["dram__bytes_read.sum"] == 268_501_760
    assert inductor["totals"]["gpu__time_duration.sum"] == 264_320


def test_parse_ncu_two_kernels_synthetic():
    """A hand-written two-kernel log in the long form (no NVTX columns): per-kernel values summed."""
    from fusebench.metrics.ncu import parse_ncu_csv

    parsed = parse_ncu_csv(open(os.path.join(DATA, "ncu_synthetic_two_kernels.csv")).read())
    assert [k["id"] for k in parsed["kernels"]] == ["0", "1"]
    t = parsed["totals"]
    assert t["dram__bytes_read.sum"] == 268_697_856 + 268_730_624
    assert t["dram__bytes_write.sum"] == 268_451_840 + 268_443_648
    assert t["smsp__inst_executed.sum"] == 2 * 35_913_728
    assert t["gpu__time_duration.sum"] == 118_944 + 119_296


def test_parse_ncu_scaled_units_and_odd_values():
    from fusebench.metrics.ncu import parse_ncu_csv, parse_value

    text = "\n".join([
        '==PROF== Connected to process 1',
        '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"',
        '"0","k0","dram__bytes_read.sum","Mbyte","268.44"',
        '"0","k0","gpu__time_duration.sum","usecond","120.5"',
        '"0","k0","smsp__inst_executed.sum","inst","n/a"',
        '==WARNING== something in the middle',
        '"1","k1","dram__bytes_read.sum","Kbyte","1,024.5"',
        '"1","k1","gpu__time_duration.sum","msecond","0,5"',
        '"1","k1","smsp__inst_executed.sum","inst","1 234"',
    ])
    p = parse_ncu_csv(text)
    assert [k["id"] for k in p["kernels"]] == ["0", "1"]
    assert p["totals"]["dram__bytes_read.sum"] == pytest.approx(268.44e6 + 1_024_500)
    assert p["totals"]["gpu__time_duration.sum"] == pytest.approx(120_500 + 500_000)
    assert p["totals"]["smsp__inst_executed.sum"] == 1234
    assert p["kernels"][0]["smsp__inst_executed.sum"] is None
    assert parse_value('"12,345,678"') == 12_345_678
    assert parse_value("1.234.567") == 1_234_567
    assert parse_value("3.5") == 3.5
    assert parse_value("(!) n/a") is None and parse_value("") is None


def test_parse_ncu_wide_form_with_units_row():
    from fusebench.metrics.ncu import parse_ncu_csv

    text = "\n".join([
        '"ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum"',
        '"","","Gbyte","byte","nsecond"',
        '"0","a","1.5","2,000","10"',
        '"1","b","0.5","3,000","30"',
    ])
    p = parse_ncu_csv(text)
    assert p["totals"]["dram__bytes_read.sum"] == pytest.approx(2e9)
    assert p["totals"]["dram__bytes_write.sum"] == 5000
    assert p["totals"]["gpu__time_duration.sum"] == 40


def test_ncu_failures_are_reasons():
    from fusebench.metrics.ncu import columns_from, ncu_failure, parse_ncu_csv

    assert "ERR_NVGPUCTRPERM" in ncu_failure("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
    assert "LibraryNotLoaded" in ncu_failure("==ERROR== Failed to initialize the profiler: LibraryNotLoaded")
    assert "no kernels" in ncu_failure("==WARNING== No kernels were profiled.")
    assert ncu_failure("==PROF== Disconnected") is None
    empty = parse_ncu_csv("==PROF== nothing\n")
    assert empty["kernels"] == [] and empty["totals"] == {}
    partial = columns_from(parse_ncu_csv(
        '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n"0","k","gpu__time_duration.sum","nsecond","5"'),
        min_bytes=100)
    assert partial["ncu_time_us"] == 0.005
    assert set(partial["na"]) == {"dram_read_bytes", "dram_write_bytes", "sass_inst", "traffic_amplification"}


def test_ncu_command_line():
    from fusebench.metrics.ncu import child_command, ncu_command

    child, why = child_command(get_case("softmax"), "eager", (8192, 8192), "fp32")
    assert why is None and child[-6:] == ["softmax", "eager", "8192x8192", "fp32", "--mode", "ncu"]
    cmd = ncu_command("/usr/local/cuda/bin/ncu", "/tmp/x.csv", child)
    joined = " ".join(cmd)
    for part in ("--target-processes all", "--cache-control none", "--clock-control none", "--csv",
                 "--log-file /tmp/x.csv", "--nvtx --nvtx-include fusebench_call/",
                 "dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,gpu__time_duration.sum"):
        assert part in joined


def test_ncu_without_ncu_is_na(monkeypatch):
    from fusebench.metrics import ncu

    monkeypatch.setattr(ncu, "find_ncu", lambda: None)
    r = ncu.run_ncu(get_case("softmax"), "eager", (64, 64), "fp32", 100)
    assert set(r["na"]) == set(ncu.COLUMNS) and "not found" in r["na"]["dram_read_bytes"]


FAKE_NCU = """#!/bin/sh
# A stand-in for ncu: writes the canned log to --log-file (or prints an error) without running anything.
log=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--log-file" ]; then log="$2"; shift; fi
  shift
done
case "$FAKE_NCU_MODE" in
  ok) cp "$FAKE_NCU_SAMPLE" "$log" ;;
  perm) echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters" > "$log"; exit 1 ;;
  none) echo "==PROF== Disconnected from process 1" > "$log"; echo "==WARNING== No kernels were profiled." >&2 ;;
esac
"""


@pytest.mark.parametrize("mode,expect", [("ok", None), ("perm", "ERR_NVGPUCTRPERM"), ("none", "no kernels")])
def test_run_ncu_with_a_stand_in(mode, expect, tmp_path, monkeypatch):
    from fusebench.metrics import ncu

    fake = tmp_path / "ncu"
    fake.write_text(FAKE_NCU)
    fake.chmod(0o755)
    monkeypatch.setenv("FUSEBENCH_NCU", str(fake))
    monkeypatch.setenv("FAKE_NCU_MODE", mode)
    monkeypatch.setenv("FAKE_NCU_SAMPLE", os.path.join(DATA, "ncu_synthetic_two_kernels.csv"))
    parsed: list = []
    r = ncu.run_ncu(get_case("double_softmax"), "eager", (8192, 8192), "fp32", 2 * 8192 * 8192 * 4,
                    parsed_out=parsed)
    _check_columns(r)
    if expect is None:
        assert r["dram_write_bytes"] == 268_451_840 + 268_443_648
        assert r["traffic_amplification"] == pytest.approx(2.0, rel=1e-3)
        assert len(parsed[0]["kernels"]) == 2
    else:
        assert set(r["na"]) == set(ncu.COLUMNS) and expect in r["na"]["dram_read_bytes"]


# ----------------------------------------------------------------------------------------------
# kernels: profiler traces and generated code


def test_trace_classification():
    from fusebench.metrics.kernels import events_from_trace, summarize

    trace = {"traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 5},
        {"ph": "X", "cat": "kernel", "name": "k_b", "ts": 30, "dur": 2.5},
        {"ph": "X", "cat": "kernel", "name": "k_a", "ts": 10, "dur": 1.5},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 5, "dur": 0.5},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": 40, "dur": 3.0},
        {"ph": "X", "cat": "kernel", "name": "k_a", "ts": 50, "dur": 1.0},
        {"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "ts": 60, "dur": 9.0},
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 70},
    ]}
    s = summarize(events_from_trace(trace))
    assert (s["kernels"], s["memsets"], s["memcpys"]) == (3, 1, 1)
    assert s["kernel_names"] == [["k_a", 2], ["k_b", 1]]
    assert s["kernel_time_us"] == pytest.approx(5.0)
    assert s["other_time_us"] == pytest.approx(3.5)


def test_wrapper_kernel_calls_gpu_style():
    from fusebench.metrics.kernels import wrapper_kernel_calls

    code = '''
triton_poi_fused_add_0 = async_compile.triton('triton_poi_fused_add_0', \'\'\'
@triton.jit
def triton_poi_fused_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    extern_kernels.mm(fake)  # inside the source string: not a call of the wrapper
\'\'\', device_str='cuda')
triton_red_fused_sum_1 = async_compile.triton('triton_red_fused_sum_1', \'\'\'x\'\'\', device_str='cuda')
async_compile.wait(globals())
def call(args):
    buf0 = empty_strided_cuda((4, 4), (4, 1), torch.float32)
    extern_kernels.mm(arg0_1, arg1_1, out=buf0)
    triton_poi_fused_add_0.run(buf0, buf1, 16, stream=stream0)
    triton_red_fused_sum_1.run(buf1, buf2, 4, 4, stream=stream0)
    buf3 = torch.ops.aten._scaled_dot_product_flash_attention.default(q, k, v)
    triton_poi_fused_add_0.run(buf2, buf4, 16, stream=stream0)
    return (buf4, )
'''
    assert wrapper_kernel_calls(code) == [
        "extern_kernels.mm", "triton_poi_fused_add_0", "triton_red_fused_sum_1",
        "aten._scaled_dot_product_flash_attention.default", "triton_poi_fused_add_0"]


@pytest.mark.parametrize("case_name,shape,expect", [
    ("pointwise_chain", (64, 64), 1),
    ("norm_chain", (64, 64), 1),
    ("matmul_add", (64, 64, 64), 1),
])
def test_cpu_inductor_kernels_from_code(case_name, shape, expect):
    ctx = _ctx(case_name, "inductor", shape)
    r = _run("kernels", ctx)
    _check_columns(r)
    assert r["kernels"] == expect
    assert sum(n for _, n in r["kernel_names"]) == expect
    assert "generated code" in r["note"]
    # the runner's compiled function was not disturbed: no recompile counted
    assert ctx.prepared.check()["recompiles"] == 0


# ----------------------------------------------------------------------------------------------
# plumbing of every family on the CPU


@pytest.mark.parametrize("impl_name", ["eager", "inductor"])
def test_every_family_on_cpu_measures_or_says_why(impl_name, tmp_path):
    ctx = _ctx("pointwise_chain", impl_name, (128, 128), db_path=str(tmp_path / "fb.db"))
    for fam in FAMILIES:
        if fam == "compile" and impl_name == "inductor":
            continue  # covered (and timed) by its own test
        r = _run(fam, ctx)
        _check_columns(r)
        assert r, fam
    assert "na" in _run("graph", ctx)
    assert "na" in _run("ncu", ctx)
    assert "run `fusebench ceilings` first" in _run("roofline", ctx)["na"]["pct_roofline"]
    k = _run("kernels", ctx)
    if impl_name == "eager":
        assert "eager" in k["na"]["kernels"]
        assert "compiles nothing" in _run("compile", ctx)["na"]["compile_cold_s"]
    else:
        assert k["kernels"] == 1


def test_cpu_memory_peak_and_footprint():
    ctx = _ctx("pointwise_chain", "eager", (256, 256))
    r = _run("memory", ctx)
    _check_columns(r)
    n = 256 * 256 * 4
    # eager materialises its intermediates: the peak holds the output and at least one temporary
    assert r["peak_mem_bytes"] >= 2 * n
    assert r["footprint_bytes"] == r["peak_mem_bytes"] - n
    ri = _run("memory", _ctx("pointwise_chain", "inductor", (256, 256)))
    assert ri["footprint_bytes"] < r["footprint_bytes"]  # the fused kernel needs no temporaries


def test_memory_peak_of_trace():
    from fusebench.metrics.memory import output_bytes, peak_of

    assert peak_of([(1, 100), (2, 50), (3, -100), (4, 200), (5, -250)]) == (250, 0)
    x = torch.zeros(10)
    assert output_bytes((x, x[:5], torch.zeros(3)), (x,)) == 12  # an output aliasing an input is not new
    assert output_bytes(torch.zeros(3), (), block=512) == 512


def test_cpu_inductor_compile_cold_and_warm():
    ctx = _ctx("pointwise_chain", "inductor", (64, 64))
    env = {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    r = _run("compile", ctx)
    assert {k: os.environ.get(k) for k in env} == env  # the environment is restored
    _check_columns(r)
    assert r["compile_cold_s"] > r["compile_warm_s"] > 0
    assert "first call - steady call" in r["note"]
    assert ctx.prepared.check()["recompiles"] == 0


# ----------------------------------------------------------------------------------------------
# FLOPs


def test_flops_cross_check_matmul():
    ctx = _ctx("matmul_add", "eager", (128, 256, 64))
    r = _run("flops", ctx)
    _check_columns(r)
    assert r["flops_counted"] == 2 * 128 * 256 * 64
    # the model adds the bias (M*N), 1/(2K) = 0.8% more: within 1%, no flag
    assert "note" not in r
    # a model that disagrees is flagged, not hidden
    ctx.row["flops"] = 3 * 128 * 256 * 64
    flagged = _run("flops", ctx)
    assert flagged["flops_counted"] == 2 * 128 * 256 * 64
    assert "FLOP counter" in flagged["note"] and "vs model" in flagged["note"]


def test_flops_not_counted_for_softmax():
    r = _run("flops", _ctx("softmax", "eager", (64, 64)))
    assert r == {"na": {"flops_counted": "FlopCounterMode counts only matmul, conv and attention"}}


# ----------------------------------------------------------------------------------------------
# ceilings and roofline


def test_ceilings_store_roundtrip_and_roofline(tmp_path):
    from fusebench.device_peaks import device_name, load_ceilings, store_ceilings
    from fusebench.metrics.roofline import roofline

    db = str(tmp_path / "fb.db")
    assert load_ceilings(db, "x") == {}
    name = device_name("cpu")
    store_ceilings(db, name, {"copy_bw": {"value": 100.0, "unit": "GB/s"},
                              "matmul_fp32": {"value": 2.0, "unit": "TFLOP/s"},
                              "timer": {"value": None, "unit": "host"}})
    got = load_ceilings(db, name)
    assert got["copy_bw"]["value"] == 100.0 and got["matmul_fp32"]["unit"] == "TFLOP/s"
    assert got["timer"]["value"] is None and got["copy_bw"]["torch"] == torch.__version__

    # memory-bound: 1e6 bytes at 100 GB/s = 10 us; measured 20 us -> 50 %
    ctx = _ctx("softmax", "eager", (64, 64), db_path=db, row={"min_bytes": 1_000_000, "flops": 1000, "time_us": 20.0})
    r = _run("roofline", ctx)
    assert r["roofline_bound"] == "memory" and r["pct_roofline"] == pytest.approx(50.0)
    assert "measured ceilings" in r["note"]
    # compute-bound: 2e9 FLOP at 2 TFLOP/s = 1000 us; bytes 10 us; measured 1250 us -> 80 %
    ctx = _ctx("matmul_relu", "eager", (64, 64, 64), db_path=db,
               row={"min_bytes": 1_000_000, "flops": 2_000_000_000, "time_us": 1250.0})
    r = _run("roofline", ctx)
    assert r["roofline_bound"] == "compute" and r["pct_roofline"] == pytest.approx(80.0)
    assert roofline(100, 0, 1.0, 100.0, None)["roofline_bound"] == "memory"
    # no time, or another device: not available, with the reason
    ctx.row["time_us"] = None
    assert "no time" in _run("roofline", ctx)["na"]["pct_roofline"]


def test_measure_ceilings_cpu_small(tmp_path):
    from fusebench.device_peaks import load_ceilings, measure_ceilings, store_ceilings

    c = measure_ceilings("cpu", cpu_matmul_n=256, copy_bytes=8 << 20)
    assert c["copy_bw"]["value"] > 0 and c["matmul_fp32"]["value"] > 0
    assert "host" in c["timer"]["unit"]
    store_ceilings(str(tmp_path / "c.db"), "cpu-test", c)
    assert set(load_ceilings(str(tmp_path / "c.db"), "cpu-test")) == set(c)


# ----------------------------------------------------------------------------------------------
# GPU


@gpu
@needs_cuda
def test_gpu_pointwise_chain_kernel_counts():
    e = _run("kernels", _ctx("pointwise_chain", "eager", (4096, 4096), device="cuda"))
    i = _run("kernels", _ctx("pointwise_chain", "inductor", (4096, 4096), device="cuda"))
    assert e["kernels"] == 4 and i["kernels"] == 1
    assert e["kernel_time_us"] > i["kernel_time_us"] > 0


@gpu
@needs_cuda
def test_gpu_graph_memory_compile():
    ctx = _ctx("softmax", "inductor", (4096, 4096), device="cuda")
    g = _run("graph", ctx)
    assert g["graph_time_us"] > 0
    m = _run("memory", ctx)
    assert m["peak_mem_bytes"] >= 4096 * 4096 * 4 and m["footprint_bytes"] >= 0
    c = _run("compile", ctx)
    assert c["compile_cold_s"] > c["compile_warm_s"] > 0


def test_flops_are_counted_once_for_the_implementations_of_a_shape(monkeypatch):
    from fusebench.metrics import flops

    counts = []
    real = flops.count_flops
    monkeypatch.setattr(flops, "count_flops", lambda fn, args: counts.append(1) or real(fn, args))
    flops._LAST.clear()
    first = get_metric("flops")(_ctx("matmul_add", "eager", (32, 16, 8)))
    again = get_metric("flops")(_ctx("matmul_add", "memcpy", (32, 16, 8)))
    assert first == again and first["flops_counted"] > 0 and len(counts) == 1
    get_metric("flops")(_ctx("matmul_add", "eager", (32, 16, 16)))  # another shape: counted anew
    assert len(counts) == 2


def test_graph_time_uses_the_runs_timing_settings(monkeypatch):
    # graph_time itself needs a GPU; what it is given is checked here
    from fusebench.measure.timing import TimingSettings
    from fusebench.metrics import graph

    seen = []
    monkeypatch.setattr(graph, "graph_time", lambda call, device, settings=None: seen.append(settings) or (5.0, 7))
    ctx = _ctx("softmax", "eager", (8, 8))
    ctx.device = "cuda:0"
    st = TimingSettings(rep_ms=3.0)
    ctx.extra["timing"] = st
    assert get_metric("graph")(ctx)["graph_time_us"] == 5.0 and seen == [st]
