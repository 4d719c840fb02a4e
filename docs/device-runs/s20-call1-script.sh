#!/usr/bin/env bash
# session 20, call 1 (one GPU): the horizontal cases' GPU tests at this commit, then
# s20-call1-probe.py (split rows with tagged partials against the previous commit's, .ab/).
export PYTHONPATH=$PWD:$PWD/.ab PYTHONUNBUFFERED=1
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
log tests
timeout -k 10 ${TEST_S:-200} python -m pytest -q -m gpu tests/test_kernels_membound.py \
  -k "horizontal or split" 2>&1 | tee $OUT/gpu-tests.txt | tail -3
log probe
timeout -k 10 ${PROBE_S:-330} python docs/device-runs/s20-call1-probe.py $OUT/probe.jsonl 2>&1 | tee $OUT/probe.txt | tail -2
log done
