#!/usr/bin/env bash
# session 21, call 4 (one GPU): with the warm call's outputs dropped from L2 (measure.timing,
# l2flush.discard_outputs), its GPU test and the L2 flush's, then layernorm, double_softmax and
# softmax at the long-row and few-row shapes (s21-call2-script.sh without its tests).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout -k 5 60 python -m pytest -q -m gpu tests/test_kernels_membound.py -k "discard" > $OUT/tests.txt 2>&1
echo "tests exit $?: $(tail -1 $OUT/tests.txt)" | tee -a $OUT/log.txt
TESTS=0 TOTAL_S=$(( ${TOTAL_S:-430} - $(date +%s) + T0 )) bash docs/device-runs/s21-call2-script.sh
