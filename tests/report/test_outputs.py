"""What the smaller commands print: `show` without the profiler's chatter, with the code that
matters and exit 2 for a cell that cannot run here; `ceilings` in a unit that shows a CPU's
rates; a progress line that names the dtype that runs."""
from __future__ import annotations

import os

import pytest
import torch
from typer.testing import CliRunner

import fusebench
from fusebench.device_peaks import format_ceilings, format_value
from fusebench.cli import app
from fusebench.runner.show import PROFILER_CHATTER, code_excerpt, without_profiler_chatter

runner = CliRunner()

PREAMBLE = (["# AOT ID: ['0_inference']"] + [f"import module_{i}" for i in range(40)]
            + ["", "async_compile = AsyncCompile()"])
KERNEL = (["cpp_fused__softmax_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r'''"]
          + [f"    kernel line {i};" for i in range(30)] + ["''')"])
CALL = ["class Runner:", "    def call(self, args):", "        arg0_1, = args",
        "        cpp_fused__softmax_0(arg0_1, buf0)", "        return (buf0, )", "", "runner = Runner(partitions=[])",
        "call = runner.call"]
INDUCTOR_CODE = "\n".join(PREAMBLE + [""] + KERNEL + ["", "async_compile.wait(globals())", ""] + CALL
                          + [f"# benchmark helper {i}" for i in range(20)])


def test_code_excerpt_shows_kernels_and_call_not_imports():
    text, what = code_excerpt(INDUCTOR_CODE, 30)
    assert "import module_" not in text and "async_compile = AsyncCompile()" not in text
    assert text.startswith("cpp_fused__softmax_0 = async_compile.cpp_pybinding(")
    assert "    def call(self, args):" in text and "cpp_fused__softmax_0(arg0_1, buf0)" in text
    assert "more lines of cpp_fused__softmax_0" in text and "imports and helpers left out" in what
    assert len([line for line in text.splitlines() if line and not line.startswith("# ...")]) <= 30
    assert code_excerpt(INDUCTOR_CODE, None) == (INDUCTOR_CODE, "")  # --code-lines 0: all of it


def test_profiler_chatter_is_dropped_and_the_rest_kept(capfd):
    assert PROFILER_CHATTER.match("USDT:2026-11-28 02:39:34 4277:4277 SyncActivityProfilerHandler.cpp:52] "
                                  "profiler_start")
    with without_profiler_chatter():
        os.write(2, b"USDT:2026-11-28 02:39:34 4277:4277 SyncActivityProfilerHandler.cpp:59] profiler_stop\n")
        os.write(2, b"a real problem\n")
    assert capfd.readouterr().err == "a real problem\n"


def test_show_of_a_cell_that_cannot_run_here_is_exit_2():
    from fusebench.impls import get_impl

    if get_impl("liger").supports(fusebench.get_case("softmax"), (64, 64), torch.float32, "cpu") is None:
        pytest.skip("Liger-Kernel runs here")
    r = runner.invoke(app, ["show", "softmax", "--shape", "64x64", "--impl", "liger", "--device", "cpu"])
    assert r.exit_code == 2
    assert r.stderr.startswith("fusebench: error: liger cannot run softmax 64x64 fp32 on cpu here (unsupported)")
    assert r.stderr.count("\n") == 1


def test_ceilings_print_a_cpus_rates_in_a_unit_that_shows_them():
    assert format_value(0.04567, "TFLOP/s") == ("45.67", "GFLOP/s")
    assert format_value(812.3, "TFLOP/s") == ("812.3", "TFLOP/s")
    assert format_value(536870912, "bytes") == ("536,870,912", "bytes")
    lines = format_ceilings("x86_64", {"matmul_fp32": {"value": 0.0123, "unit": "TFLOP/s"}})
    assert "0.0" not in lines[1] and "12.3 GFLOP/s" in lines[1]


def test_progress_names_the_dtype_that_runs():
    from fusebench.runner.cell import dtype_that_runs
    from fusebench.runner.plan import plan_cells

    [cell, *_] = plan_cells(["rmsnorm"], ["eager"], "quick", None, "cpu", "fwd_bwd")
    assert (cell.dtype, dtype_that_runs(cell)) == ("bf16", "bf16 as fp32")
    [cell, *_] = plan_cells(["softmax"], ["eager"], "quick", None, "cpu")
    assert dtype_that_runs(cell) == cell.dtype == "fp32"
