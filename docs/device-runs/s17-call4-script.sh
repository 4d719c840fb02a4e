#!/usr/bin/env bash
# session 17, call 4 (one GPU): the GPU tests of the cooperative plans (now 10 a shape: 2048-column
# chunks at 4 warps added), then the probe at 512-2048 rows of 65536 columns, this commit's plans
# only (softmax and double_softmax keep exp(x - m_c), one exp an element fewer; layernorm's two
# sums as one reduction).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
log "gpu tests"
timeout -k 5 ${TEST_S:-250} python -m pytest -q -m gpu tests/test_kernels_membound.py -k cooperative > $OUT/tests.txt 2>&1
log "exit $?"; tail -8 $OUT/tests.txt | tee -a $OUT/log.txt
log "probe"
PROBE_OLD=0 PROBE_SHAPES=512x65536,1024x65536,2048x65536 FUSEBENCH_AUTOTUNE_LOG=/tmp/autotune.log \
  timeout -k 10 ${PROBE_S:-250} python docs/device-runs/s17-call1-probe.py \
  $OUT/probe.jsonl double_softmax layernorm softmax_backward softmax norm_chain 2>&1 | tee $OUT/probe.txt | tail -3
log "exit $?"
gzip -c /tmp/autotune.log > $OUT/autotune.log.gz
log done
