#!/usr/bin/env bash
# session 18, call 1 (one GPU): every GPU test of the memory-bound kernels (the split kernels'
# shared helpers of session 17 and this session's coop_layout are checked here first), then the
# probe of layernorm's cooperative plans at long rows: the plans that hold weight and bias in
# registers across rounds (norms.layernorm_holds_wb) against those that re-read them from L2.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
log "gpu tests"
timeout -k 5 ${TEST_S:-300} python -m pytest -q -m gpu tests/test_kernels_membound.py > $OUT/tests.txt 2>&1
log "exit $?"; tail -8 $OUT/tests.txt | tee -a $OUT/log.txt
log "probe"
PROBE_OLD=0 PROBE_SHAPES=${PROBE_SHAPES:-512x65536,1024x65536,2048x65536,1024x32768} FUSEBENCH_AUTOTUNE_LOG=/tmp/autotune.log \
  timeout -k 10 ${PROBE_S:-200} python docs/device-runs/s17-call1-probe.py $OUT/probe.jsonl layernorm 2>&1 \
  | tee $OUT/probe.txt | tail -3
log "exit $?"
gzip -c /tmp/autotune.log > $OUT/autotune.log.gz
gzip $OUT/tests.txt
log done
