"""What the kernels compile to (sm_90 SASS, built offline by the real JIT: no GPU needed; skipped
without Triton's NVIDIA backend tools)."""
import os

import pytest

from fusebench.kernels import launch_plans

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


@pytest.mark.slow
def test_single_pass_kernels_issue_every_load_before_the_first_barrier():
    """One DRAM round trip per program: no single-pass kernel may issue a global load after a barrier."""
    from fusebench.kernels.sass import loads_after_first_barrier

    kernels = _sass_report()
    assert len(kernels) >= 10 and any(k.startswith("bias_dropout_add_transposed") for k in kernels)
    late = {k: v["order"] for k, v in kernels.items() if loads_after_first_barrier(v["order"])}
    assert late == {}


@pytest.mark.slow
def test_unmasked_long_row_plans_do_not_spill():
    """Inductor's two-pass shape for softmax_backward at 32768 columns (64 registers a thread at
    32 warps) is only fast unspilled: no stack."""
    usage = _sass_report("--usage")
    assert "softmax_backward loop 32768 32w" in usage
    assert {k: v["stack"] for k, v in usage.items() if v["stack"]} == {}
    assert usage["softmax_backward loop 32768 32w"]["registers"] <= 64  # 32 warps: 64 a thread at most


@pytest.mark.slow
def test_cooperative_plans_fit_their_register_cap():
    """Two or four cooperative programs share an SM only under the register cap
    (launch_plans.coop_launch_args); under it, ptxas spills at most 8 bytes in the plans without a prefetch,
    staged or not.  Triton 3.6 (the GPU machine's) spills more in two LayerNorm plans, by the
    bytes below; Triton 3.9 does not."""
    import triton

    usage = _sass_report("--coop")
    spills = {"layernorm coop 4096 8w 4/SM": 24, "layernorm coop 8192 16w 2/SM staged": 32} \
        if triton.__version__.startswith("3.6.") else {}
    staged = {k for k in usage if " staged" in k}
    # every shape of each kernel, and staged where its buffers fit (softmax_backward: 2 of them)
    assert len(usage) - len(staged) == 5 * len(launch_plans.COOP_SHAPES) and len(staged) == 4 * len(launch_plans.COOP_SHAPES) + 2
    assert sum(k.endswith("weight held") for k in usage) == 10
    assert {k: v for k, v in usage.items() if v["registers"] > v["cap"] or v["stack"] > spills.get(k, 8)} == {}
    # the staged plans' rounds go through shared memory (cp.async); the others' do not
    assert {k for k, v in usage.items() if v["async_copies"]} == staged
