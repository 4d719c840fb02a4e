#!/usr/bin/env bash
# session 8, call 7 (1x H200): layernorm's streamed plan reads its input 1.33x from DRAM at 65536
# columns (1.11x without its weight and bias loads).  Experiment: each row's chunks visited from
# chunk (row % n) on, wrapping around, so that programs side by side touch different columns
# ("rstream", norms._layernorm_rotated_kernel), against the plain streamed and looped plans.
# No change (1.33x, same speed): kernel and spec removed after this call; they are in commit d59c0f4.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout -k 10 240 python bench/long_rows.py --cases layernorm --shapes 512x65536,2048x65536,8192x65536,1024x32768 \
  --plans "stream:8192:16:1;rstream:8192:16:1;rstream:8192:32:1;loop:8192:32:132:1" --ncu --out $OUT 2>&1 | grep "of copy" | grep -v "^\["
