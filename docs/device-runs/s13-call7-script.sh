#!/usr/bin/env bash
# session 13, call 7 (one H200): what Inductor runs where call 6 found our kernel below 0.95x of it
# (fusebench show: its kernels, code and the configs its autotuner kept).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
for cs in bias_dropout_add_transposed:128x16384 bias_dropout_add_transposed:32768x2048 \
          horizontal_reduction_pointwise:512x8192; do
  c=${cs%%:*}; s=${cs##*:}
  timeout -k 5 120 python -m fusebench show $c --shape $s --impl inductor > $OUT/show-$c-$s.txt 2>&1
  echo "$cs exit $?"; grep -n -i -E "config|XBLOCK|YBLOCK|R0_BLOCK|num_warps|num_stages|def triton|µs" $OUT/show-$c-$s.txt | head -40
done
