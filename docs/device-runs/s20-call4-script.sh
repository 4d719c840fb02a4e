#!/usr/bin/env bash
# session 20, call 4 (one GPU): with the 64-values-a-thread cooperative shape (4096 at 2 warps,
# 4 an SM) shared by all five two-pass kernels (utils.COOP_SHAPES), the GPU tests that force and
# race every cooperative plan, then layernorm at session 19's long-row and few-row shapes.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
log "gpu tests"
timeout -k 5 ${TEST_S:-170} python -m pytest -q -m gpu tests/test_kernels_membound.py \
  -k "cooperative_and_streamed or exchange_repeated" > $OUT/tests.txt 2>&1
log "exit $?"; tail -4 $OUT/tests.txt | tee -a $OUT/log.txt
SHAPES=128x65536,256x65536,512x65536,1024x65536,2048x65536,4096x65536,1024x32768,2048x32768,4096x32768,16384x16384
log "run"
FUSEBENCH_AUTOTUNE_LOG=/tmp/autotune.log timeout -k 15 $(( ${TOTAL_S:-380} - $(date +%s) + T0 )) python -m fusebench run \
  layernorm --shapes $SHAPES --impl eager,inductor,triton,memcpy --metrics none --db $OUT/long.db > /tmp/run.txt 2>&1
log "exit $?"; tail -14 /tmp/run.txt >> $OUT/log.txt
[ -f /tmp/autotune.log ] && gzip -c /tmp/autotune.log > $OUT/autotune.log.gz
log done
