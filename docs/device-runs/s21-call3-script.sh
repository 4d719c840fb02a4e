#!/usr/bin/env bash
# session 21, call 3 (one GPU): s21-call3-probe.py (the warm call's write-back), then norm_chain and
# softmax_backward at the long-row and few-row shapes (s21-call2-script.sh, no tests) in the time left.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
timeout -k 10 ${PROBE_S:-200} python docs/device-runs/s21-call3-probe.py $OUT/probe.jsonl > $OUT/probe.txt 2>&1
echo "[$(( $(date +%s) - T0 ))s] probe exit $?" | tee -a $OUT/log.txt
tail -25 $OUT/probe.txt
TESTS=0 CASES="${CASES:-norm_chain softmax_backward}" TOTAL_S=$(( ${TOTAL_S:-540} - $(date +%s) + T0 )) \
  bash docs/device-runs/s21-call2-script.sh
