#!/usr/bin/env bash
# session 17, call 1 (one GPU): cooperative rows with tagged partials against the per-row barrier
# (s17-call1-probe.py; the previous commit's kernels travel in .ab/ as fusebench_old), the copy
# ceiling of this GPU, then the GPU tests of the cooperative plans.
export PYTHONPATH=$PWD:$PWD/.ab PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
log "ceilings"
timeout -k 5 60 python -m fusebench ceilings --db $OUT/ceilings.db >> $OUT/log.txt 2>&1
log "probe"
FUSEBENCH_AUTOTUNE_LOG=/tmp/autotune.log timeout -k 10 ${PROBE_S:-400} python docs/device-runs/s17-call1-probe.py \
  $OUT/probe.jsonl double_softmax layernorm softmax_backward softmax norm_chain 2>&1 | tee $OUT/probe.txt | tail -3
log "exit $?"
gzip -c /tmp/autotune.log > $OUT/autotune.log.gz
log "gpu tests"
timeout -k 5 ${TEST_S:-120} python -m pytest -q -m gpu tests/test_kernels_membound.py -k cooperative > $OUT/tests.txt 2>&1
log "exit $?"; tail -5 $OUT/tests.txt | tee -a $OUT/log.txt
log done
