#!/usr/bin/env bash
# session 13, call 9 (one H200): bench/paired.py after the review mend (its warm call now the
# runner's _warm_call, built only where the runner would time with one): a small shape (with the
# warm call) and one above warm_call_max_bytes (without), and the GPU tests of paired timing.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
timeout -k 5 120 python -m pytest -q -m gpu tests/test_paired.py > $OUT/gpu-tests.txt 2>&1
echo "tests exit $?"; tail -2 $OUT/gpu-tests.txt
timeout -k 5 200 python bench/paired.py bias_dropout_add_transposed 128x16384,32768x8192 --rounds 100 | tee $OUT/paired.txt
