#!/usr/bin/env bash
# session 5, call 5 (4x H200): the GPU tests of the final kernels (compute on GPU0, memory-bound on GPU1).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
L=$OUT; T0=$(date +%s)
CUDA_VISIBLE_DEVICES=0 timeout -k 10 ${BUDGET:-200} python -m pytest -q -m gpu tests/test_kernels_compute.py > $L/gpu-tests-compute.txt 2>&1 &
P0=$!
CUDA_VISIBLE_DEVICES=1 timeout -k 10 ${BUDGET:-200} python -m pytest -q -m gpu tests/test_kernels_membound.py -k "horizontal or transposed or pointwise" > $L/gpu-tests-membound.txt 2>&1 &
P1=$!
wait $P0 $P1
tail -3 $L/gpu-tests-*.txt; echo "elapsed $(( $(date +%s) - T0 ))s"
