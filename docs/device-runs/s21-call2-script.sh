#!/usr/bin/env bash
# session 21, call 2 (one GPU): with cooperative plans staged 2 deep through shared memory among the
# candidates (utils.row_plans, where they fit), the GPU tests that force and race every cooperative
# plan; then layernorm, double_softmax and softmax at session 19's long-row and few-row shapes, each
# its own store (SHAPES and CASES to change them).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
if [ "${TESTS:-1}" = 1 ]; then
  log "gpu tests"
  timeout -k 5 ${TEST_S:-240} python -m pytest -q -m gpu tests/test_kernels_membound.py \
    -k "cooperative_and_streamed or exchange_repeated" > $OUT/tests.txt 2>&1
  log "exit $?"; tail -4 $OUT/tests.txt | tee -a $OUT/log.txt
fi
SHAPES=${SHAPES:-128x65536,256x65536,512x65536,1024x65536,2048x65536,4096x65536,1024x32768,2048x32768,4096x32768,16384x16384}
for c in ${CASES:-layernorm double_softmax softmax}; do
  left=$(( ${TOTAL_S:-560} - $(date +%s) + T0 ))
  if [ $left -lt 40 ]; then log "$c: no time left"; continue; fi
  log "$c run (${left}s)"
  FUSEBENCH_AUTOTUNE_LOG=/tmp/autotune.log timeout -k 15 $left python -m fusebench run \
    $c --shapes $SHAPES --impl eager,inductor,triton,memcpy --metrics none --db $OUT/long-$c.db > /tmp/run-$c.txt 2>&1
  log "$c exit $?"; tail -14 /tmp/run-$c.txt >> $OUT/log.txt
done
[ -f /tmp/autotune.log ] && gzip -c /tmp/autotune.log > $OUT/autotune.log.gz
log done
