#!/usr/bin/env bash
# session 8, call 8 (1x H200): the GPU tests of the memory-bound kernels at the final kernel code
# (after the _softmax_accumulate refactor and the rotated-layernorm experiment's removal).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout -k 10 330 python -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_membound.py 2>&1 | tail -3 | tee $OUT/gpu-tests.txt
