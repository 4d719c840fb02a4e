"""Autotuning spaces of the GEMM kernels in matmul.py, and the pruning that fits them to a shape.

Hopper: large 128x256 / 256x128 tiles with 8 warps (two warpgroups issuing wgmma), 128x128 for mid
sizes, smaller tiles only when the grid would not fill the GPU.  Ampere and older: the Triton
tutorial's space.  Under the interpreter a single small config, so that tests do not autotune.
A pruning function drops, before anything is compiled or timed, the configs whose pipeline staging
does not fit in shared memory and the tiles that do not suit the shape.  `config` builds the
configs of every GEMM-like kernel (conv.py's implicit GEMM too).
"""
from __future__ import annotations

import triton

from fusebench.kernels.device import is_hopper_or_newer, next_pow2, num_sms
from fusebench.kernels.device import is_interpreter as interpreting


def config(bm, bn, bk, stages, warps, group=8, **extra):
    """A triton.Config of a tiled GEMM: BLOCK_M x BLOCK_N tiles, BLOCK_K-deep steps, GROUP_M rows of
    tiles per group of programs (gemm_utils.grouped_tile), and any kernel-specific switches."""
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group, **extra},
                         num_stages=stages, num_warps=warps)


def gemm_configs():
    if interpreting():
        return [config(32, 32, 32, 1, 4)]
    if is_hopper_or_newer():
        return [
            config(128, 256, 64, 3, 8), config(128, 256, 64, 4, 8), config(256, 128, 64, 3, 8),
            config(128, 128, 64, 4, 8), config(128, 128, 64, 4, 4), config(128, 64, 64, 4, 4),
            config(64, 128, 64, 4, 4),
            # grids of about one wave (small M or N, long K): deeper K steps or pipelines keep more
            # bytes in flight (each of these is the fastest at some such shape: docs/kernels.md)
            config(64, 128, 128, 3, 4), config(64, 64, 128, 4, 4), config(128, 64, 128, 4, 4),
            config(64, 128, 64, 6, 4), config(128, 64, 64, 6, 4), config(128, 256, 64, 4, 8),
            config(128, 128, 64, 5, 8),
            config(64, 64, 64, 4, 4),  # last: the smallest footprint, fits even fp32 operands
        ]
    # Ampere and older: the tutorial's space (less shared memory, no wgmma)
    return [
        config(128, 256, 32, 3, 8), config(128, 128, 32, 4, 4), config(128, 64, 32, 4, 4), config(64, 128, 32, 4, 4),
        config(64, 64, 32, 4, 4), config(32, 64, 32, 5, 2),
    ]


def tma_configs():
    if not is_hopper_or_newer():  # never launched: TMA is Hopper-only
        return [config(128, 128, 64, 3, 8, EPILOGUE_SUBTILE=False, PERSISTENT=False)]
    # EPILOGUE_SUBTILE stores C in two halves: half the shared-memory staging buffer, which is what
    # lets the 128x256 tile keep three pipeline stages within Hopper's 227 KB.
    # (256x128 would need 240 KB even so: left out.)  PERSISTENT: one program per SM.
    return [config(bm, bn, bk, s, w, EPILOGUE_SUBTILE=sub, PERSISTENT=pers)
            for bm, bn, bk, s, w, sub in [(128, 256, 64, 3, 8, True), (128, 128, 64, 4, 8, True),
                                           (128, 128, 64, 4, 4, True)]
            for pers in (True, False)] + [
        config(128, 256, 64, 4, 8, EPILOGUE_SUBTILE=True, PERSISTENT=False),
        config(128, 64, 64, 4, 4, EPILOGUE_SUBTILE=False, PERSISTENT=False),
        config(64, 128, 64, 4, 4, EPILOGUE_SUBTILE=False, PERSISTENT=False)] + [
        # M = 128 with long K (a grid of one wave or less): short tiles, 128-deep K steps, deep
        # pipelines (as fast as torch.mm there, faster than the pointer configs: docs/kernels.md,
        # 'Matmul epilogues and back-to-back GEMM')
        config(bm, bn, bk, s, w, EPILOGUE_SUBTILE=False, PERSISTENT=False)
        for bm, bn, bk, s, w in [(64, 64, 128, 6, 4), (64, 128, 128, 4, 4), (128, 64, 128, 4, 4)]] + [
        # M = 256-512, N = K = 4096-8192: 64x256 tiles at 5 stages, one of the two best there
        config(64, 256, 64, 5, 8, EPILOGUE_SUBTILE=True, PERSISTENT=False)]


def conv_configs(hopper, older=((128, 128, 32, 3, 8), (128, 64, 32, 4, 4), (64, 64, 32, 4, 4))):
    """The configs of a convolution's GEMM kernel: one small config under the interpreter (no
    autotuning in tests), the (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps) tuples `hopper` on Hopper,
    `older` elsewhere."""
    if interpreting():
        return [config(32, 32, 16, 1, 4)]
    return [config(*c) for c in (hopper if is_hopper_or_newer() else older)]


def prune_conv(configs, elem_size: int, cout: int, cin: int, cout_side: str):
    """The pipelines that fit shared memory at this element size (fp32 stages twice fp16's bytes),
    then no tile much wider than C_out (along its `cout_side` block) or deeper than C_in; else the
    smallest tile that fits."""
    configs = fit_smem(configs, elem_size)
    keep = [c for c in configs if c.kwargs[cout_side] <= max(64, next_pow2(cout))
            and c.kwargs["BLOCK_K"] <= max(16, next_pow2(cin))]
    return keep or [min(configs, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] * c.kwargs["BLOCK_K"])]


# Operand staging of the software pipeline (num_stages buffers of an A and a B tile) must fit Hopper's
# 227 KB of shared memory per SM, with room left for the epilogue; fp32 tiles are twice fp16's.
SMEM_STAGING_LIMIT = 200 * 1024


def staging_bytes(c, elem_size: int) -> int:
    return c.num_stages * (c.kwargs["BLOCK_M"] + c.kwargs["BLOCK_N"]) * c.kwargs["BLOCK_K"] * elem_size


def fit_smem(configs, elem_size: int):
    """The configs whose pipeline staging fits SMEM_STAGING_LIMIT; when none does, the smallest
    one with its pipeline made shallower until it fits (fp32 tiles are twice fp16's bytes)."""
    fits = [c for c in configs if staging_bytes(c, elem_size) <= SMEM_STAGING_LIMIT]
    if fits:
        return fits
    c = min(configs, key=lambda c: staging_bytes(c, elem_size))
    stages = c.num_stages
    while stages > 1 and staging_bytes(c, elem_size) * stages // c.num_stages > SMEM_STAGING_LIMIT:
        stages -= 1
    return [triton.Config(dict(c.kwargs), num_stages=stages, num_warps=c.num_warps)]


def prune_gemm(configs, named_args, **kwargs):
    """Drop configs that cannot suit this shape before benchmarking (saves compile time too).

    Never a tile much taller/wider than the matrix.  Large outputs (at least four waves of 128x128
    tiles): only big tiles (>= 128x128).  Smaller ones: every config that fits -- tile size does
    not predict the winner there (docs/kernels.md).
    """
    M, N = named_args["M"], named_args["N"]
    if len(configs) == 1:
        return configs
    sms = num_sms()
    es = (named_args["a_ptr"] if "a_ptr" in named_args else named_args["a_desc"].base).element_size()
    configs = fit_smem(configs, es)
    fits = [c for c in configs
            if c.kwargs["BLOCK_M"] <= max(64, next_pow2(M)) and c.kwargs["BLOCK_N"] <= max(64, next_pow2(N))]
    fits = fits or configs[-1:]

    if triton.cdiv(M, 128) * triton.cdiv(N, 128) < 4 * sms:
        return fits
    return [c for c in fits if c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] >= 128 * 128] or fits


def splitk_gpu_configs():
    # one tile per program and K-slice; deep pipelines: these grids are memory-bound.  Wide tiles
    # (128x256) read each A slice half as often from L2, for as many B bytes from DRAM.
    return [config(128, 128, 64, 4, 8), config(64, 128, 64, 4, 4), config(128, 64, 64, 4, 4),
            config(64, 64, 128, 4, 4), config(64, 128, 128, 3, 4), config(128, 256, 64, 3, 8),
            config(128, 128, 128, 3, 8)]


def splitk_configs():
    if interpreting():
        return [config(32, 32, 32, 1, 4)]
    return splitk_gpu_configs()


def prune_splitk(configs, named_args, **kwargs):
    """Drop split-K configs that cannot fit or suit this shape: pipeline staging over
    SMEM_STAGING_LIMIT (the fp32 128x128x64 tile at 4 stages needs 256 KB, more than Hopper's
    227 KB: it fails with OutOfResources), and tiles taller than max(64, next_pow2(M)) rows
    (128-row tiles for M = 64 would be half padding).  At least one config is always kept."""
    configs = fit_smem(configs, named_args["a_ptr"].element_size())
    rows = max(64, next_pow2(named_args["M"]))
    return ([c for c in configs if c.kwargs["BLOCK_M"] <= rows]
            or [min(configs, key=lambda c: c.kwargs["BLOCK_M"])])
