#!/usr/bin/env bash
# session 17, call 2 (one GPU): call 1's probe again after the fix of the poll (every thread tests
# the tags of its own copy of the partials; call 1 found stale copies in a few rows), every plan's
# output checked at every shape; then the GPU tests of the cooperative plans, the repeated ones too.
export PYTHONPATH=$PWD:$PWD/.ab PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
log "gpu tests"
timeout -k 5 ${TEST_S:-250} python -m pytest -q -m gpu tests/test_kernels_membound.py -k cooperative > $OUT/tests.txt 2>&1
log "exit $?"; tail -8 $OUT/tests.txt | tee -a $OUT/log.txt
log "probe"
FUSEBENCH_AUTOTUNE_LOG=/tmp/autotune.log timeout -k 10 ${PROBE_S:-300} python docs/device-runs/s17-call1-probe.py \
  $OUT/probe.jsonl double_softmax layernorm softmax_backward softmax norm_chain 2>&1 | tee $OUT/probe.txt | tail -3
log "exit $?"
gzip -c /tmp/autotune.log > $OUT/autotune.log.gz
log done
