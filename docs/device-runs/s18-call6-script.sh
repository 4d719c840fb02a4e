#!/usr/bin/env bash
# session 18, call 6 (one GPU): the cooperative race test with layernorm's two weight-holding plans
# (each cooperative plan 3 times at 1000x65536 and 300x70000), and softmax_backward 512x4096 (0.93x
# Inductor in session 16's grid cell) timed in pairs.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
log "gpu tests"
timeout -k 5 70 python -m pytest -q -m gpu tests/test_kernels_membound.py -k "exchange_repeated and layernorm" > $OUT/tests.txt 2>&1
log "exit $?"; tail -3 $OUT/tests.txt | tee -a $OUT/log.txt
log pairs
timeout -k 5 50 python bench/paired.py softmax_backward 512x4096 --impls triton,inductor --rounds 200 --csv $OUT/paired.csv \
  2>&1 | grep -v Warning | tail -4 | tee -a $OUT/log.txt
log done
