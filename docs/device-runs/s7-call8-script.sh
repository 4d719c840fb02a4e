#!/usr/bin/env bash
# session 7, call 8 (1x H200): bench/long_rows.py's Nsight Compute pass after it moved onto
# metrics/ncu.ncu_command (log file instead of stdout) and the cells' flush buffer: one case, two plans.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout -k 10 200 python bench/long_rows.py --cases norm_chain --shapes 8192x65536 \
  --plans "loop:16384:32:132:1;loop:8192:16:0:0" --ncu --out $OUT 2>&1 | tail -4
