#!/usr/bin/env bash
# session 12, call 13 (one H200): GPU tests of the warm call after the review folded its two
# copies (runner and autotuner) into timing.warm_call.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
timeout -k 5 200 python -m pytest -q -m gpu tests/test_kernels_membound.py tests/test_runner.py \
  -k "warm or touch or head_start or shadow or grid_kind or pointwise or bias" > $OUT/gpu-tests.txt 2>&1
echo "tests exit $?"; tail -2 $OUT/gpu-tests.txt
