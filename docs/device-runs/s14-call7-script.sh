#!/usr/bin/env bash
# session 14, call 7 (one H200): bench/paired.py at the three small bias_dropout_add_transposed shapes
# that the call-6 grid cells put below 0.95x Inductor (the call-4 cells had them above it).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
FUSEBENCH_AUTOTUNE_LOG=$OUT/autotune.log timeout -k 5 200 python bench/paired.py bias_dropout_add_transposed \
  512x512,128x2048,512x128 --rounds 300 --csv $OUT/paired.csv 2>>$OUT/paired-err.txt | tee $OUT/paired.txt
echo "paired exit ${PIPESTATUS[0]}"
