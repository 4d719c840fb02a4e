#!/usr/bin/env bash
# The compute-bound cases: the matmul-epilogue grids (fp16 and bf16) with torch.mm alone as the
# same-run ceiling and cuBLASLt's fused epilogue (`cublaslt`, not yet measured), attention at
# seqlen >= 2048 against every SDPA backend, and the quick shapes of back-to-back GEMM and the
# conv epilogues; one HTML report per run.  On four H200s (GPUS=all, one
# worker per GPU) session 4 measured each matmul grid (576 cells) in about 2 min 50 s on three
# GPUs, each attention dtype (48 cells) in about 70 s and the conv/b2b run (36 cells) in 53 s on one.
#
#   GPUS=0,1 bash bench/compute_grids.sh [DB] [REPORT_PREFIX]
set -euo pipefail
DB=${1:-compute.db}
PREFIX=${2:-compute}
GPUS=${GPUS:-all}
ATTN=4x16x2048x128x0,4x16x2048x128x1,4x16x4096x128x0,4x16x4096x128x1,1x16x8192x128x0,1x16x8192x128x1,8x32x2048x64x0,8x32x2048x64x1
fusebench ceilings --db "$DB"
for dt in fp16 bf16; do
    fusebench run matmul_add matmul_relu matmul_add_relu --shapes grid --dtype "$dt" \
        --impl eager,triton,torch-mm,cublaslt --gpus "$GPUS" --db "$DB"
    fusebench report --db "$DB" -o "$PREFIX-matmul-$dt.html" --pair triton/eager --pair triton/torch-mm --pair triton/cublaslt
done
for dt in fp16 bf16; do
    fusebench run attention --shapes "$ATTN" --dtype "$dt" --gpus "$GPUS" --db "$DB" \
        --impl eager,inductor,triton,sdpa-flash,sdpa-efficient,sdpa-cudnn
    fusebench report --db "$DB" -o "$PREFIX-attention-$dt.html" \
        --pair triton/sdpa-flash --pair triton/sdpa-cudnn --pair triton/inductor
done
fusebench run matmul_matmul conv_add conv_relu conv_bn --impl eager,inductor,triton --gpus "$GPUS" --db "$DB"
fusebench report --db "$DB" -o "$PREFIX-conv-b2b.html" --pair triton/eager --pair triton/inductor
