"""What a Triton kernel compiles to: its SASS, built offline for a chosen GPU (no GPU needed).

The property checked here is memory-level parallelism of the single-pass kernels: every global
load is issued before the first barrier.  A barrier waits for the shared-memory stores before it,
and those store loaded data; a load issued after it starts only once an earlier load has come back
from DRAM -- a second round trip (docs/kernels.md, 'What every kernel shares').
A kernel can do exactly that: the compiler may move one input into the others' layout through
shared memory before it issues their loads.

    python -m fusebench.kernels.sass        # the memory-op order of each single-pass kernel, as JSON
    python -m fusebench.kernels.sass --usage  # registers and spilled bytes of the unmasked long-row plans
    python -m fusebench.kernels.sass --coop   # the same for the cooperative plans, under their register caps,
                                              # with their async copies (the staged plans' rounds)

The second property: no spills in the long-row plans that Inductor's kernels match (per-element
masks hold registers; see exchange.within).  The third: the cooperative plans fit their programs per
SM (coop_launch_args caps their registers) with little spilled.

Needs Triton's bundled ptxas and cuobjdump (the NVIDIA backend's bin/), and the kernels compiled
by the real JIT, not the interpreter (run it with TRITON_INTERPRET unset).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

# One SASS instruction line of cuobjdump: "        /*0230*/   @P0 LDG.E.128 R4, desc[UR4][R2.64] ;"
_SASS_LINE = re.compile(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?);")
_MEM_OP = re.compile(r"^(LDG|STG|LDS|STS|LDSM|STSM|BAR|ATOMG|RED|EXIT)\b")


def memory_op_order(sass: str) -> tuple[int, str]:
    """(instruction count, the global/shared memory operations and barriers in order, runs
    collapsed: "LDGx8 STSx14 BAR LDSx16 STGx4 EXIT")."""
    ops: list[list] = []
    n = 0
    for line in sass.splitlines():
        m = _SASS_LINE.match(line)
        if not m:
            continue
        n += 1
        words = m.group(1).split()
        opcode = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        op = _MEM_OP.match(opcode)
        if op:
            if ops and ops[-1][0] == op.group(1):
                ops[-1][1] += 1
            else:
                ops.append([op.group(1), 1])
    return n, " ".join(f"{o}x{c}" if c > 1 else o for o, c in ops)


def loads_after_first_barrier(order: str) -> bool:
    """Whether a global load (LDG) comes after the first barrier in a memory_op_order string."""
    ops = [tok.split("x")[0] for tok in order.split()]
    return "BAR" in ops and "LDG" in ops[ops.index("BAR"):]


def tool_path(tool: str) -> str:
    """Path of one of Triton's bundled NVIDIA tools (ptxas, cuobjdump)."""
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", tool)


def _cuobjdump(cubin: bytes, option: str) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([tool_path("cuobjdump"), option, f.name], capture_output=True, text=True,
                              check=True, timeout=120).stdout


def cubin_sass(cubin: bytes) -> str:
    return _cuobjdump(cubin, "-sass")


def compile_sass(kernel, constexprs: dict, num_warps: int, arch: int = 90, maxnreg: int | None = None) -> str:
    """SASS of `kernel` (a @triton.jit function) for sm_<arch>.  Arguments not in `constexprs`:
    `sync_ptr` (the cooperative kernels' exchange buffer) an int64 pointer, other names ending in
    _ptr fp32 pointers, `eps` an fp32, the rest int32; all of them divisible by 16, as the JIT
    specializes them for power-of-two shapes and aligned tensors."""
    return cubin_sass(_compile(kernel, constexprs, num_warps, arch, maxnreg))


def _compile(kernel, constexprs: dict, num_warps: int, arch: int, maxnreg: int | None = None) -> bytes:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = kernel
    while not isinstance(fn, triton.runtime.jit.JITFunction):
        fn = fn.fn
    names = fn.arg_names
    sig = {}
    for p in fn.params:
        if p.is_constexpr or p.name in constexprs:
            sig[p.name] = "constexpr"
        else:
            sig[p.name] = ("*i64" if p.name == "sync_ptr" else "*fp32" if p.name.endswith("_ptr")
                           else "fp32" if p.name == "eps" else "i32")
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, t in sig.items() if t in ("*fp32", "*i64", "i32")}
    src = ASTSource(fn, sig, constexprs=dict(constexprs), attrs=attrs)
    options = {"num_warps": num_warps, **({"maxnreg": maxnreg} if maxnreg else {})}
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    return compiled.asm["cubin"]


def resource_usage(kernel, constexprs: dict, num_warps: int, arch: int = 90,
                   maxnreg: int | None = None) -> tuple[int, int]:
    """(registers per thread, stack bytes per thread) of `kernel` built as compile_sass builds it
    (under a register cap, if given); a non-zero stack in these kernels, which keep no arrays in
    local memory, is ptxas spilling."""
    out = _cuobjdump(_compile(kernel, constexprs, num_warps, arch, maxnreg), "-res-usage")
    m = re.search(r"REG:(\d+) STACK:(\d+)", out)
    if m is None:
        raise RuntimeError(f"no resource usage in cuobjdump's output: {out[-300:]}")
    return int(m.group(1)), int(m.group(2))


def single_pass_kernels() -> dict[str, tuple]:
    """label -> (kernel, constexprs, num_warps): the one-launch, one-read plans of the memory-bound
    cases at typical tiles (fp32, contiguous rows: the column strides are the JIT's constant 1)."""
    from fusebench.kernels import horizontal as hor, pointwise as pw, softmax as sm
    from fusebench.kernels.rowwise import Mode

    rows = dict(ALIGN=4, BLOCK_M=1)
    out = {f"{name} 1x{n}{note}": _rowwise(name, Mode.TILE, dict(rows, BLOCK_N=n, PREFETCH=prefetch), warps)
           for name, n, warps, prefetch, note in [
               ("softmax", 4096, 8, False, ""), ("double_softmax", 4096, 8, False, ""),
               ("softmax_backward", 4096, 8, False, ""),
               ("layernorm", 8192, 16, True, " (parameters with the rows)"), ("norm_chain", 4096, 8, False, "")]}
    out["softmax 1x16384 (one reduction)"] = _rowwise("softmax", Mode.TILE, dict(
        rows, BLOCK_N=16384, PREFETCH=False, TILE=sm.SOFTMAX.tile_one_reduction), 32)
    out.update({
        "horizontal_reduction_pointwise 1x4096": (hor._horizontal_tile_kernel, dict(
            rows, BLOCK_N=4096, stride_an=1, WITH_COS=True, WITH_MAX=False, EVICT=""), 8),
        "horizontal_reduction_reduction 1x4096": (hor._horizontal_tile_kernel, dict(
            rows, BLOCK_N=4096, stride_an=1, WITH_COS=False, WITH_MAX=True, EVICT="evict_first"), 8),
    })
    for p in pw.TRANSPOSED_PLANS + pw.TRANSPOSED_SMALL_PLANS + pw.TRANSPOSED_GROUPED_PLANS:
        group = f" grouped {p.group_m}" if p.group_m > 1 else ""
        out[f"bias_dropout_add_transposed {p.block_m}x{p.block_n} {p.num_warps}w{group}"] = (
            pw._bias_dropout_add_transposed_kernel,
            dict(ALIGN_N=4, ALIGN_M=4, BLOCK_M=p.block_m, BLOCK_N=p.block_n, GROUP_M=p.group_m, stride_xn=1,
                 stride_bt1=1, stride_rt1=1),
            p.num_warps)
    return out


def _rowwise(name: str, mode, consts: dict, *rest) -> tuple:
    """(kernel, constexprs, *rest) for row-wise op `name` in `mode`, as rowwise.launch builds it for
    contiguous rows (EVEN where the op has it: rows a whole number of steps)."""
    from fusebench.kernels import norms, rowwise, softmax as sm

    op = {"softmax": sm.SOFTMAX, "double_softmax": sm.DOUBLE_SOFTMAX, "softmax_backward": sm.SOFTMAX_BACKWARD,
          "layernorm": norms.LAYERNORM, "norm_chain": norms.NORM_CHAIN}[name]
    unit = dict(stride_an=1, stride_bn=1, SAVE=0)
    flags = {rowwise.Mode.TILE: dict(EVEN=op.even, WHOLE_ROWS=op.even, WIDE=False),
             rowwise.Mode.LOOP: dict(EVEN=op.even, PREFETCH_LOOP=op.prefetch_loop),
             rowwise.Mode.COOP: dict(K=op.stats_k)}.get(mode, {})
    return (rowwise.KERNELS[mode], {**unit, **rowwise.steps(op, mode), **flags, **consts}, *rest)


def unmasked_long_row_kernels() -> dict[str, tuple]:
    """label -> (kernel, constexprs, num_warps): long-row plans that must not spill, built as the
    launcher builds them for rows that are a whole number of steps (EVEN, see exchange.within)."""
    from fusebench.kernels.rowwise import Mode

    # Inductor's shape for this case: one 32-warp program per row, passes of one 32768-column step
    # (with column masks ptxas spills it)
    return {f"softmax_backward loop {n} {w}w": _rowwise("softmax_backward", Mode.LOOP,
                                                           dict(ALIGN=4, BLOCK_N=n, STAGES=None), w)
            for n, w in ((32768, 32), (16384, 16))}


def cooperative_kernels() -> dict[str, tuple]:
    """label -> (kernel, constexprs, num_warps, register cap): the five cooperative kernels at
    65536 fp32 columns in each of the plans row_plans lists without the prefetch (with it,
    the registers hold two chunks, and ptxas spills 24-136 bytes in some: the tuner times
    them like the others), unstaged and, where that fits, staged 2 deep; layernorm's as
    launched, holding weight and bias where norms.layernorm_holds_wb says so."""
    from fusebench.kernels import norms
    from fusebench.kernels.launch_plans import COOP_SHAPES, coop_register_cap, shared_memory_per_program, stages_fit
    from fusebench.kernels.rowwise import Mode

    out = {}
    for name, row_inputs in (("softmax", 1), ("double_softmax", 1), ("softmax_backward", 2), ("layernorm", 1),
                             ("norm_chain", 1)):
        for chunk, warps, per_sm in COOP_SHAPES:
            cap = coop_register_cap(per_sm, warps)
            staged_fits = stages_fit(per_sm, 2, chunk, 4, row_inputs, shared_memory_per_program("cpu"))  # sm_90's
            for stages in (1, 2) if staged_fits else (1,):
                hold = name == "layernorm" and norms.layernorm_holds_wb(chunk, warps, cap, False)
                consts = dict(ALIGN=4, BLOCK_N=chunk, BLOCK_S=65536 // chunk, PREFETCH=False, WARPS=warps,
                              STAGES=stages, HOLD=hold)
                label = f"{name} coop {chunk} {warps}w {per_sm}/SM" + (" staged" if stages > 1 else "")
                out[label + (" weight held" if hold else "")] = _rowwise(name, Mode.COOP, consts, warps, cap)
    return out


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    result = {}
    if "--usage" in args:  # registers and stack (spill) bytes per thread of the long-row plans
        for label, (kernel, consts, warps) in unmasked_long_row_kernels().items():
            regs, stack = resource_usage(kernel, consts, warps)
            result[label] = {"registers": regs, "stack": stack}
    elif "--coop" in args:  # the same for the cooperative plans, built under their register caps
        for label, (kernel, consts, warps, cap) in cooperative_kernels().items():
            regs, stack = resource_usage(kernel, consts, warps, maxnreg=cap)
            # async copies into shared memory (cp.async): whether the pipeliner staged the rounds
            copies = len(re.findall(r"\bLDGSTS\b", compile_sass(kernel, consts, warps, maxnreg=cap)))
            result[label] = {"registers": regs, "stack": stack, "cap": cap, "async_copies": copies}
    else:
        for label, (kernel, consts, warps) in single_pass_kernels().items():
            n, order = memory_op_order(compile_sass(kernel, consts, warps))
            result[label] = {"instructions": n, "order": order}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
