"""GEMM with a fused epilogue.

Cases (fusebench/cases/matmul.py): matmul_add `a @ b + bias`, matmul_relu `relu(a @ b)`,
matmul_add_relu `relu(a @ b + bias)`; matmul_matmul `(a @ b) @ c` is in b2b.py.

Kernels
- `_gemm_kernel`: the tutorial's tiled GEMM (pointer arithmetic, grouped program order for L2
  reuse) whose epilogue -- bias add, residual add, relu -- is applied to the fp32 accumulator
  before the one and only store.  Runs everywhere, the interpreter included.
- `_gemm_tma_kernel`: the same GEMM for Hopper fed by TMA tensor descriptors, persistent (one
  program per SM walking the tiles in grouped order) or not, as an autotuning switch.  For fp16/bf16
  with TMA-compatible strides, gemm() times both kernels at the first call for a shape and keeps
  the faster (the gemm_impl setting: gemm_impl_for).
- `_gemm_splitk_kernel` + `_splitk_reduce_kernel`: split-K for skinny problems whose output has
  fewer 128x128 tiles than the GPU has SMs (e.g. 128x8192x8192): each program multiplies one
  K-slice into an fp32 workspace, the second kernel sums the slices in a fixed order
  (deterministic, unlike atomics) and applies the epilogue.  A candidate of the same first-call
  timing as the TMA kernel.

The autotuning spaces of the three GEMM kernels and their pruning are in gemm_configs.py.

Host side: gemm() keeps a plan per problem key (shapes, strides, dtypes, device, pointer alignment,
epilogue, policy): the implementation chosen, the config its autotuner chose (tuned_launch), the grid
and the integer arguments, all decided at the key's first call.  A later call is one dict lookup,
C's allocation and the launch through launch.Launch (TMA: a, b and c in their descriptors' places).

The epilogue switches (HAS_BIAS, HAS_RES, RELU) are runtime scalars, not constexprs: one compiled
binary per (dtype, config) then serves all three matmul cases and the 1x1 convolutions, which
keeps autotuning affordable.  They are branch-uniform and outside the K loop, so they cost nothing.
"""
from __future__ import annotations


import torch
import triton
import triton.language as tl

from fusebench import settings
from fusebench.cases import matmul as cases
from fusebench.kernels.device import is_interpreter as interpreting
from fusebench.kernels.device import num_sms
from fusebench.kernels import gemm_utils as gu
from fusebench.kernels.gemm_configs import gemm_configs, prune_gemm, prune_splitk, splitk_configs, tma_configs
from fusebench.kernels.gemm_utils import (
    check_device, dot_precision, grouped_tile, has_tensor_descriptors, precision_note, tuned_launch,
)
from fusebench.kernels.launch import STATE, Launch, signature
from fusebench.kernels.tuning import fastest, fastest_record, source_hash
from fusebench.kernels.tuning import triton_autotune as autotune
from fusebench.kernels.registry import triton_kernel

# ------------------------------------------------------------------------------------------------
# Kernel 1: tiled GEMM with fused epilogue, pointer arithmetic.


@triton.jit
def _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn, HAS_BIAS, HAS_RES, RELU):
    """acc (fp32, BLOCK_M x BLOCK_N) -> acc + bias[n] + res[m, n], then relu; all in fp32."""
    if HAS_BIAS != 0:
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
        acc = acc + bias.to(tl.float32)[None, :]
    if HAS_RES != 0:
        res_ptrs = res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :] * stride_rn
        res = tl.load(res_ptrs, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N), other=0.0)
        acc = acc + res.to(tl.float32)
    if RELU != 0:
        acc = tl.maximum(acc, 0.0)
    return acc


@autotune(configs=gemm_configs(), key=["M", "N", "K"], prune_configs_by={"early_config_prune": prune_gemm})
@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit(do_not_specialize=["HAS_BIAS", "HAS_RES", "RELU"])
def _gemm_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, res_ptr,  #
                 M, N, K,  #
                 stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_rm, stride_rn,  #
                 HAS_BIAS, HAS_RES, RELU,  #
                 PRECISION: tl.constexpr, EVEN_K: tl.constexpr,  #
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # which C tile this program owns, in grouped order
    pid = tl.program_id(axis=0)
    pid_m, pid_n = grouped_tile(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)

    # Rows of A / columns of B past the matrix edge are redirected to row/column 0: the loads stay
    # in bounds without a mask, the garbage lands in C rows/columns that the store masks off.
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_am = tl.max_contiguous(tl.multiple_of(tl.where(offs_m < M, offs_m, 0), BLOCK_M), BLOCK_M)
    offs_bn = tl.max_contiguous(tl.multiple_of(tl.where(offs_n < N, offs_n, 0), BLOCK_N), BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # &A[m, k] = a + m*stride_am + k*stride_ak ; &B[k, n] = b + k*stride_bk + n*stride_bn
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:  # the K tail reads zeros
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # epilogue on the fp32 accumulator, then the single store of C
    acc = _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn, HAS_BIAS, HAS_RES, RELU)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


# ------------------------------------------------------------------------------------------------
# Kernel 2: TMA GEMM for Hopper, same epilogue; persistent or one tile per program (a config switch).


def _tma_block_shapes(nargs):
    # Descriptors are built on the host with a dummy block; each config sets its own block here.
    bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk] if nargs["B_TRANS"] else [bk, bn]
    nargs["c_desc"].block_shape = [bm, bn // 2] if nargs["EPILOGUE_SUBTILE"] else [bm, bn]


def _with_hook(configs):
    for c in configs:
        c.pre_hook = _tma_block_shapes
    return configs


@triton.jit
def _tma_tile(a_desc, b_desc, off_m, off_n, k_tiles,  #
              B_TRANS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """fp32 accumulator of one (BLOCK_M, BLOCK_N) tile; TMA fills out-of-bounds with 0."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k_tiles):
        off_k = ki * BLOCK_K
        a = a_desc.load([off_m, off_k])
        if B_TRANS:  # b is stored (N, K): load a (BLOCK_N, BLOCK_K) tile and transpose the view
            b = b_desc.load([off_n, off_k]).T
        else:
            b = b_desc.load([off_k, off_n])
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _tma_finish(acc, c_desc, bias_ptr, res_ptr, pid_m, pid_n, M, N, stride_rm, stride_rn, HAS_BIAS, HAS_RES, RELU,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr):
    """Epilogue on the fp32 accumulator, then the TMA store (clipped at the matrix edge)."""
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn, HAS_BIAS, HAS_RES, RELU)
    c = acc.to(c_desc.dtype)
    if EPILOGUE_SUBTILE:  # (BM, BN) -> (BM, 2, BN/2) -> two (BM, BN/2) halves: half the staging buffer
        c0, c1 = tl.split(tl.permute(tl.reshape(c, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], c0)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], c1)
    else:
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], c)


@autotune(configs=_with_hook(tma_configs()), key=["M", "N", "K", "B_TRANS"],
          prune_configs_by={"early_config_prune": prune_gemm})
@triton.jit(do_not_specialize=["HAS_BIAS", "HAS_RES", "RELU"])
def _gemm_tma_kernel(a_desc, b_desc, c_desc, bias_ptr, res_ptr,  #
                     M, N, K, stride_rm, stride_rn,  #
                     HAS_BIAS, HAS_RES, RELU,  #
                     B_TRANS: tl.constexpr, NUM_SMS: tl.constexpr,  #
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                     EPILOGUE_SUBTILE: tl.constexpr, PERSISTENT: tl.constexpr):
    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    if PERSISTENT:
        # NUM_SMS programs; each walks tiles start_pid, start_pid + NUM_SMS, ... in grouped order.
        # A second tile counter for the epilogue, as in the persistent-matmul tutorial (the pipeliner
        # handles it better than one value shared by the prologue and the epilogue).
        tile_id_c = start_pid - NUM_SMS
        for tile_id in tl.range(start_pid, num_pid_m * num_pid_n, NUM_SMS, flatten=True):
            pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
            acc = _tma_tile(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, k_tiles, B_TRANS, BLOCK_M, BLOCK_N,
                            BLOCK_K)
            tile_id_c += NUM_SMS
            pid_m, pid_n = grouped_tile(tile_id_c, num_pid_m, num_pid_n, GROUP_M)
            _tma_finish(acc, c_desc, bias_ptr, res_ptr, pid_m, pid_n, M, N, stride_rm, stride_rn, HAS_BIAS, HAS_RES,
                        RELU, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)
    else:
        # one tile per program, like kernel 1
        pid_m, pid_n = grouped_tile(start_pid, num_pid_m, num_pid_n, GROUP_M)
        acc = _tma_tile(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, k_tiles, B_TRANS, BLOCK_M, BLOCK_N, BLOCK_K)
        _tma_finish(acc, c_desc, bias_ptr, res_ptr, pid_m, pid_n, M, N, stride_rm, stride_rn, HAS_BIAS, HAS_RES,
                    RELU, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)


# ------------------------------------------------------------------------------------------------
# Kernel 3: split-K for skinny problems (few output tiles, long K).


@autotune(configs=splitk_configs(), key=["M", "N", "K", "SPLITS"],
          prune_configs_by={"early_config_prune": prune_splitk})
@triton.jit
def _gemm_splitk_kernel(a_ptr, b_ptr, ws_ptr, M, N, K, K_PER_SPLIT, SPLITS,  #
                        stride_am, stride_ak, stride_bk, stride_bn,  #
                        PRECISION: tl.constexpr,  #
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # axis 0: the output tile, in grouped order; axis 1: the K-slice [k0, k0 + K_PER_SPLIT)
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    split = tl.program_id(1)
    k0 = split * K_PER_SPLIT
    k_len = tl.minimum(K - k0, K_PER_SPLIT)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # rows/columns past the edge read row/column 0 (never stored), as in kernel 1
    offs_am = tl.max_contiguous(tl.multiple_of(tl.where(offs_m < M, offs_m, 0), BLOCK_M), BLOCK_M)
    offs_bn = tl.max_contiguous(tl.multiple_of(tl.where(offs_n < N, offs_n, 0), BLOCK_N), BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # &A[m, k0 + k] and &B[k0 + k, n]
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + (k0 + offs_k)[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(k_len, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_len - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_len - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    # the slice's partial product, fp32, to workspace[split] (a contiguous (M, N) matrix)
    ws_ptrs = ws_ptr + split.to(tl.int64) * M * N + offs_m[:, None] * N + offs_n[None, :]
    tl.store(ws_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit(do_not_specialize=["HAS_BIAS", "HAS_RES", "RELU"])
def _splitk_reduce_kernel(ws_ptr, c_ptr, bias_ptr, res_ptr, M, N, stride_cm, stride_cn, stride_rm, stride_rn,  #
                          HAS_BIAS, HAS_RES, RELU,  #
                          SPLITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # C tile = epilogue(sum of the SPLITS partial tiles), summed in slice order
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    ws_ptrs = ws_ptr + offs_m[:, None] * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for s in tl.static_range(SPLITS):
        acc += tl.load(ws_ptrs + s * M * N, mask=mask, other=0.0)
    acc = _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn, HAS_BIAS, HAS_RES, RELU)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=mask)


def splitk_count(M: int, N: int, K: int) -> int:
    """K-slices for a skinny problem: doubled while the 128x128 tiles times the slices stay within
    two programs per SM and each slice is at least 512 deep (16 at most); 1 (no split) when the
    tiles alone fill the GPU."""
    tiles, sms = triton.cdiv(M, 128) * triton.cdiv(N, 128), num_sms()
    splits = 1
    while tiles * splits * 2 <= 2 * sms and K // (splits * 2) >= 512 and splits < 16:
        splits *= 2
    return splits


def splitk_slices(M: int, N: int, K: int) -> tuple[int, int]:
    """(depth of a K-slice, number of slices) that the split-K path uses: at least two slices
    (it may be forced on any shape), each a whole number of 128-deep steps (so of every BLOCK_K)."""
    k_per_split = triton.cdiv(triton.cdiv(K, max(2, splitk_count(M, N, K))), 128) * 128
    return k_per_split, triton.cdiv(K, k_per_split)


# ------------------------------------------------------------------------------------------------
# Host side.


def _tma_ok(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, res) -> bool:
    if not has_tensor_descriptors() or a.dtype not in (torch.float16, torch.bfloat16):
        return False
    # (the bias and the residual are read with pointers: any strides are fine)
    def tma_2d(t):  # last stride 1, other stride and base 16-byte aligned
        es = t.element_size()
        return t.stride(1) == 1 and (t.stride(0) * es) % 16 == 0 and t.data_ptr() % 16 == 0

    b_ok = tma_2d(b) or tma_2d(b.t())
    return tma_2d(a) and b_ok and tma_2d(c)


def gemm_impl_for(a, b, c, res=None, policy: str | None = None) -> str:
    """The implementation for these operands, "ptr", "tma", "splitk", or "auto" (several apply:
    time them), under `policy` (default: the gemm_impl setting, FUSEBENCH_GEMM_IMPL).

    The policy: "ptr", "tma" (Hopper, fp16/bf16, 16-byte aligned rows; "ptr" elsewhere), "splitk",
    or "auto" (default): where TMA applies, both are timed at the first call for a shape and the
    faster one is kept (tuning.fastest, GPU time as the cells measure it, host launch cost
    excluded); skinny shapes (splitk_count > 1) add split-K to the race.  "ptr" (loads pipelined
    with cp.async) is the default, used untimed off the GPU.  The race is close (docs/kernels.md,
    'Matmul epilogues and back-to-back GEMM')."""
    policy = settings.current().gemm_impl if policy is None else policy
    if policy in ("ptr", "splitk"):
        return policy
    tma = _tma_ok(a, b, c, res)
    if policy == "tma":
        return "tma" if tma else "ptr"
    skinny = splitk_count(a.shape[0], b.shape[1], a.shape[1]) > 1 and not interpreting()
    return "auto" if tma or skinny else "ptr"


def _choice_key(a, b, c):
    return ("gemm", a.shape[0], b.shape[1], a.shape[1], a.dtype, a.stride(), b.stride(), c.stride(), a.device.index)


# {problem key: plan}.  A plan is `plan(a, b, bias, residual, out) -> c`: it allocates C (unless
# `out` is given) and launches, with the implementation, the autotuned config, the grid and every
# integer argument fixed when the key was first met (gemm_with_plan).  The settings that decide a
# plan (gemm_impl, fp32_precision) are part of its key, read at each call: a changed setting
# (settings.refresh) takes the next call to a plan of its own.
_PLANS = STATE.table("matmul.plans")


def gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, residual: torch.Tensor | None = None,
         relu: bool = False, out: torch.Tensor | None = None, impl: str | None = None) -> torch.Tensor:
    """out[M, N] = epilogue(a[M, K] @ b[K, N]) in one kernel; epilogue = + bias[N], + residual[M, N], relu.

    `out` may be any strided (M, N) view (the 1x1 convolutions write into an NHWC tensor).
    A call whose key (launch.signature of the operands, relu, impl and the settings that decide the
    plan) was met before is one dict lookup, C's allocation and the launch(es).
    """
    s = settings.current()
    plan = _PLANS.get((signature(a, b, bias, residual, out), relu, impl, s.gemm_impl, s.fp32_precision,
                       gu.MULTI_KERNEL))
    if plan is not None:
        return plan(a, b, bias, residual, out)
    return gemm_with_plan(a, b, bias, residual, relu, out, impl)[1]


def gemm_with_plan(a, b, bias=None, residual=None, relu=False, out=None, impl=None):
    """(plan, C): gemm() made at a key's first call, with the plan it keeps for the key's later
    calls (None where there is nothing to launch: an empty problem).  Chooses the implementation
    (timing the candidates where several apply) and runs it through its autotuner.

    A plan reads only the data pointers of the tensors it is given (the key fixed everything else),
    so a caller may pass the tensors that its 2-D operands are views of (conv.py's 1x1 path)."""
    assert a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0], (a.shape, b.shape)
    assert a.dtype == b.dtype
    s = settings.current()
    policy = s.gemm_impl
    key = (signature(a, b, bias, residual, out), relu, impl, policy, s.fp32_precision, gu.MULTI_KERNEL)
    M, K = a.shape
    N = b.shape[1]
    # C's allocation in a plan: new_empty_strided with plain tuples, the cheapest from Python
    alloc = ((M, N), (N, 1))
    c = a.new_empty_strided(*alloc) if out is None else out
    if M == 0 or N == 0:
        return None, c
    if K == 0:  # an empty sum: only the epilogue remains (not cached: nothing to launch)
        acc = torch.zeros((M, N), device=a.device, dtype=torch.float32)
        acc = acc + (bias.float() if bias is not None else 0) + (residual.float() if residual is not None else 0)
        return None, c.copy_(torch.relu(acc) if relu else acc)
    impl = impl or gemm_impl_for(a, b, c, residual, policy)
    if impl == "auto":
        kw = dict(bias=bias, residual=residual, relu=relu, out=c)
        candidates = {"ptr": lambda: gemm(a, b, impl="ptr", **kw)}
        if _tma_ok(a, b, c, residual):
            candidates["tma"] = lambda: gemm(a, b, impl="tma", **kw)
        if splitk_count(M, N, K) > 1:
            candidates["splitk"] = lambda: gemm(a, b, impl="splitk", **kw)
        source = source_hash(__name__, "fusebench.kernels.gemm_configs")  # the choice depends on both
        impl = fastest(_choice_key(a, b, c), candidates, device=a.device, source=source)
    build = {"splitk": _splitk_plan, "tma": _tma_plan}.get(impl, _ptr_plan)
    plan = build(a, b, c, bias, residual, relu, alloc)  # runs this call
    if impl == "splitk" and out is None and gu.graph_capturable(a):
        plan = gu.GraphCall(plan, (a, b, bias, residual, None))
    _PLANS[key] = plan
    return plan, c


def _epilogue_args(c, bias, residual, relu):
    """(bias pointer, residual pointer), then the residual's strides and the three flags.  Without a
    bias or a residual C is passed in its place (never read), with C's strides: the same integer
    specialization, so the same binary."""
    res = residual if residual is not None else c
    return ((bias if bias is not None else c, res),
            (res.stride(0), res.stride(1), int(bias is not None), int(residual is not None), int(relu)))


def _ptr_plan(a, b, c, bias, residual, relu, alloc):
    M, K = a.shape
    N = b.shape[1]
    ptrs, tail = _epilogue_args(c, bias, residual, relu)
    ints = (M, N, K, *a.stride(), *b.stride(), *c.stride(), *tail)
    consts = dict(PRECISION=dot_precision(a.dtype))

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    args = (a, b, c, *ptrs, *ints)
    _gemm_kernel[grid](*args, **consts)
    launch = tuned_launch(_gemm_kernel, grid, args, consts)

    return _one_launch_plan(launch, ints, alloc)


def _one_launch_plan(launch, ints, alloc):
    """plan(a, b, bias, residual, out) -> c: `launch` writing c, a new tensor of `alloc`'s (shape,
    strides) unless `out` is given; an absent bias or residual passes c in its place."""
    shape, stride = alloc

    def plan(a, b, bias, residual, out):
        c = a.new_empty_strided(shape, stride) if out is None else out
        launch(a, b, c, c if bias is None else bias, c if residual is None else residual, *ints)
        return c

    return plan


def _tma_plan(a, b, c, bias, residual, relu, alloc):
    from triton.tools.tensor_descriptor import TensorDescriptor

    M, K = a.shape
    N = b.shape[1]
    b_trans = b.stride(1) != 1  # b is a transposed view of an (N, K) row-major matrix
    b_mat = b.t() if b_trans else b
    dummy = [1, 1]  # the autotuner's pre_hook sets each config's block shapes
    descs = [TensorDescriptor.from_tensor(t, dummy) for t in (a, b_mat, c)]  # checks the operands once
    ptrs, tail = _epilogue_args(c, bias, residual, relu)
    ints = (M, N, K, *tail)
    sms = num_sms(a.device.index or 0)
    consts = dict(B_TRANS=b_trans, NUM_SMS=sms)

    def grid(meta):
        tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
        return (min(sms, tiles) if meta["PERSISTENT"] else tiles,)

    args = (*descs, *ptrs, *ints)
    _gemm_tma_kernel[grid](*args, **consts)
    cfg = _gemm_tma_kernel.best_config.kwargs
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    geometry = {0: ([M, K], list(a.stride()), [bm, bk]),
                1: (list(b_mat.shape), list(b_mat.stride()), [bn, bk] if b_trans else [bk, bn]),
                2: ([M, N], list(c.stride()), [bm, bn // 2] if cfg["EPILOGUE_SUBTILE"] else [bm, bn])}
    # the launch takes a, b and c in their descriptors' places (b is b_mat's view: the same address)
    launch = tuned_launch(_gemm_tma_kernel, grid, args, consts, descriptors=geometry)
    return _one_launch_plan(launch, ints, alloc)


def _splitk_plan(a, b, c, bias, residual, relu, alloc):
    M, K = a.shape
    N = b.shape[1]
    k_per_split, splits = splitk_slices(M, N, K)
    ws_shape, ws_stride = (splits, M, N), (M * N, N, 1)
    ws = a.new_empty_strided(ws_shape, ws_stride, dtype=torch.float32)
    gemm_ints = (M, N, K, k_per_split, splits, *a.stride(), *b.stride())
    consts = dict(PRECISION=dot_precision(a.dtype))

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), splits)

    args = (a, b, ws, *gemm_ints)
    _gemm_splitk_kernel[grid](*args, **consts)
    partials = tuned_launch(_gemm_splitk_kernel, grid, args, consts)
    bm, bn = (16, 32) if interpreting() else (32, 128)
    reduce = Launch(_splitk_reduce_kernel, (triton.cdiv(M, bm), triton.cdiv(N, bn)),
                    dict(SPLITS=splits, BLOCK_M=bm, BLOCK_N=bn, num_warps=4))
    ptrs, tail = _epilogue_args(c, bias, residual, relu)
    reduce_ints = (M, N, *c.stride(), *tail)
    reduce(ws, c, *ptrs, *reduce_ints)

    shape, stride = alloc

    def plan(a, b, bias, residual, out):
        c = a.new_empty_strided(shape, stride) if out is None else out
        ws = a.new_empty_strided(ws_shape, ws_stride, dtype=torch.float32)
        partials(a, b, ws, *gemm_ints)
        reduce(ws, c, c if bias is None else bias, c if residual is None else residual, *reduce_ints)
        return c

    return plan


# ------------------------------------------------------------------------------------------------
# Registered wrappers: same signatures and outputs as the eager functions.


def _supports(shape, dtype, device):
    return check_device(dtype, device)


def _describe_gemm(shape, dtype):
    note = precision_note(dtype)
    m, n, k = shape[:3]
    policy = settings.current().gemm_impl
    if policy == "splitk":
        return f"{note}, split-K GEMM ({splitk_slices(m, n, k)[1]} slices) + epilogue in the reduction"
    if policy == "tma" and dtype != torch.float32 and has_tensor_descriptors():
        return f"{note}, TMA GEMM + fused epilogue"
    # the case's operands are contiguous: the key the wrapper used
    rec = fastest_record(("gemm", m, n, k, dtype, (k, 1), (n, 1), (n, 1), 0))
    if rec and policy == "auto":
        times = ", ".join(f"{name} {ms * 1e3:.1f}us" for name, ms in rec[1].items()) or "cached from an earlier run"
        what = {"ptr": "tiled GEMM (pointer loads) + fused epilogue", "tma": "TMA GEMM + fused epilogue",
                "splitk": f"split-K GEMM ({splitk_slices(m, n, k)[1]} slices) + epilogue in the reduction"}
        return f"{note}, {what[rec[0]]} (fastest of the kernels timed here: {times})"
    return f"{note}, tiled GEMM (pointer loads) + fused epilogue"


@triton_kernel(cases.MATMUL_ADD, supports=_supports, describe=_describe_gemm, interpretable=True)
def matmul_add(a, b, bias):
    return gemm(a, b, bias=bias)


@triton_kernel(cases.MATMUL_RELU, supports=_supports, describe=_describe_gemm, interpretable=True)
def matmul_relu(a, b):
    return gemm(a, b, relu=True)


@triton_kernel(cases.MATMUL_ADD_RELU, supports=_supports, describe=_describe_gemm, interpretable=True)
def matmul_add_relu(a, b, bias):
    return gemm(a, b, bias=bias, relu=True)
