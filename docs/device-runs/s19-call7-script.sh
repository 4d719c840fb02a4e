#!/usr/bin/env bash
# session 19, call 7 (one GPU): with the two 32-values-a-thread cooperative shapes shared by all
# five two-pass kernels (utils.COOP_SHAPES), the GPU tests that force and race every cooperative
# plan, then call 5's long-row and few-row shapes of the five row-wise cases again at this commit.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
log "gpu tests"
timeout -k 5 ${TEST_S:-150} python -m pytest -q -m gpu tests/test_kernels_membound.py \
  -k "cooperative_and_streamed or exchange_repeated" > $OUT/tests.txt 2>&1
log "exit $?"; tail -4 $OUT/tests.txt | tee -a $OUT/log.txt
SHAPES=128x65536,256x65536,512x65536,1024x65536,2048x65536,4096x65536,1024x32768,2048x32768,4096x32768,16384x16384
log "run"
FUSEBENCH_AUTOTUNE_LOG=/tmp/autotune.log timeout -k 15 $(( ${TOTAL_S:-460} - $(date +%s) + T0 )) python -m fusebench run \
  double_softmax softmax layernorm norm_chain softmax_backward --shapes $SHAPES --impl eager,inductor,triton,memcpy \
  --metrics none --db $OUT/long.db > /tmp/run.txt 2>&1
log "exit $?"; tail -8 /tmp/run.txt >> $OUT/log.txt
[ -f /tmp/autotune.log ] && gzip -c /tmp/autotune.log > $OUT/autotune.log.gz
log done
