#!/usr/bin/env bash
# session 19, call 1 (one GPU): the cooperative plans with their last round cut finer
# (utils.coop_tail) against the same plans without it and against the previous commit's kernels
# (.ab/fusebench_old), at long rows (s19-call1-probe.py); then the GPU tests that force every
# cooperative plan and race their exchange.
export PYTHONPATH=$PWD:$PWD/.ab PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
log "probe"
FUSEBENCH_AUTOTUNE_LOG=/tmp/autotune.log timeout -k 10 ${PROBE_S:-330} python docs/device-runs/s19-call1-probe.py \
  $OUT/probe.jsonl softmax layernorm double_softmax softmax_backward norm_chain 2>&1 | tee $OUT/probe.txt | tail -3
log "exit $?"
gzip -c /tmp/autotune.log > $OUT/autotune.log.gz
log "gpu tests"
timeout -k 5 $(( ${TOTAL_S:-580} - $(date +%s) + T0 )) python -m pytest -q -m gpu tests/test_kernels_membound.py \
  -k "cooperative_and_streamed or exchange_repeated" > $OUT/tests.txt 2>&1
log "exit $?"; tail -8 $OUT/tests.txt | tee -a $OUT/log.txt
log done
