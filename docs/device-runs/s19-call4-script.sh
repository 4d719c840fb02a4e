#!/usr/bin/env bash
# session 19, call 4 (one GPU): the GPU tests that force every split, cooperative, streamed and
# re-reading plan and race the cooperative exchange, at this commit (call 1 ran them on the
# reverted finer-last-round kernels); then the norm_chain grid cells below 0.95x Inductor in
# call 2's grid, timed in pairs.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
log "gpu tests"
timeout -k 5 200 python -m pytest -q -m gpu tests/test_kernels_membound.py -k "cooperative_and_streamed or exchange_repeated" \
  > $OUT/tests.txt 2>&1
log "exit $?"; tail -3 $OUT/tests.txt | tee -a $OUT/log.txt
log pairs
timeout -k 5 150 python bench/paired.py norm_chain 1024x4096,1024x256,32768x256 --impls triton,inductor --rounds 200 \
  --csv $OUT/paired.csv 2>&1 | grep -v Warning | tail -12 | tee -a $OUT/log.txt
log done
