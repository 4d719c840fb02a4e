#!/usr/bin/env bash
# session 14, call 5 (one H200): bias_dropout_add_transposed with 64x64 tiles in column order
# (pointwise.column_order_plans) -- GPU tests, then bench/paired.py against Inductor at the grid's
# 2^28-element shapes (call 4 had 32768x8192 and 65536x4096 at 0.93-0.94x Inductor).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
timeout -k 5 100 python -m pytest -q tests/test_kernels_membound.py -k "transposed" > $OUT/gpu-tests.txt 2>&1
log "tests exit $?"; tail -2 $OUT/gpu-tests.txt
FUSEBENCH_AUTOTUNE_LOG=$OUT/autotune.log timeout -k 5 200 python bench/paired.py bias_dropout_add_transposed \
  32768x8192,65536x4096,16384x16384,8192x32768,32768x2048 --rounds 100 --csv $OUT/paired.csv 2>>$OUT/paired-err.txt \
  | tee $OUT/paired.txt
log "paired exit ${PIPESTATUS[0]}"
