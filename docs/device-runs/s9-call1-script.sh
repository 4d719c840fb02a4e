#!/usr/bin/env bash
# session 9, call 1 (1x H200): staged tile plans -- persistent rows-on-chip programs (one row in
# registers) whose next row tl.range stages in shared memory (cp.async), against the current
# winners at 32768 columns (one 32-warp program per row; streamed) and 16384 columns; GPU tests of
# the staged plans.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout -k 10 120 python -m pytest -q tests/test_kernels_membound.py -k "gpu_staged_tile_plans" 2>&1 | tail -3
timeout -k 10 280 python bench/long_rows.py --cases softmax,double_softmax,norm_chain,layernorm \
  --shapes 1024x32768,4096x32768,16384x32768 \
  --plans "tile:1:32;tile:1:32:1:2;stream:16384:32:1;stream:8192:16:1" --ncu --out $OUT/a 2>&1 | grep "of copy" | grep -v "^\["
timeout -k 10 150 python bench/long_rows.py --cases layernorm,double_softmax,softmax,norm_chain \
  --shapes 2048x16384,4096x16384 \
  --plans "tile:1:16;tile:1:32;tile:1:16:2:2;tile:1:32:1:3;tile:1:16:1:3;tile:2:32:1:2" --out $OUT/b 2>&1 | grep "of copy" | grep -v "^\["
