#!/usr/bin/env bash
# session 21, call 5 (one GPU, the session's last seconds): the two-pass kernels' GPU size tests
# (autotuned, fp32 and bf16: staged cooperative plans among the candidates), as far as time allows.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout -k 5 ${TEST_S:-130} python -m pytest -q -m gpu tests/test_kernels_membound.py \
  -k "gpu_sizes and (softmax or layernorm or norm_chain)" > $OUT/tests.txt 2>&1
echo "exit $?"; tail -5 $OUT/tests.txt
