#!/usr/bin/env bash
# session 15, call 7 (one H200): paired timing of the two grid cells of call 5 below 0.95x Inductor
# (softmax_backward at 1024x32768 and 2048x32768), and 4096x32768 beside them; two processes.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
for p in 1 2; do
  FUSEBENCH_AUTOTUNE_LOG=$OUT/autotune-$p.log timeout -k 5 200 python bench/paired.py softmax_backward \
    1024x32768,2048x32768,4096x32768 --impls triton,inductor --rounds 200 --csv $OUT/paired.csv 2>&1 \
    | tee $OUT/paired-$p.txt | grep -v "^  *[0-9.]* ms"
done
