#!/usr/bin/env bash
# session 15, calls 5 and 6 (4x H200): the autotuner's GPU tests (its timing helpers were
# refactored this session), then the full grids (fp32, eager / inductor / triton / memcpy, the
# clean flush) of the six row-wise cases last measured in sessions 11-13, at this session's commit
# (the autotuner's finalist round, session 14, now picks their plans).  CASES= overrides the list;
# RESUME=run id resumes from the store carried in s14grid/grid.db.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s); END=$((T0 + ${BUDGET:-550}))
left() { echo $(( END - $(date +%s) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
mkdir -p /tmp/g
if [ -z "$RESUME" ]; then
  log "GPU tests"
  timeout -k 5 90 python -m pytest -q tests/test_kernels_membound.py -k "autotune" > $OUT/gpu-tests.txt 2>&1
  log "tests exit $?"; tail -2 $OUT/gpu-tests.txt | tee -a $OUT/log.txt
  CASES=${CASES:-"softmax double_softmax softmax_backward layernorm norm_chain horizontal_reduction_reduction"}
  log "grid run: $CASES"
  FUSEBENCH_AUTOTUNE_LOG=/tmp/g/autotune.log timeout -k 10 $(( $(left) - 20 )) python -m fusebench run $CASES \
    --shapes grid --impl eager,inductor,triton,memcpy --metrics none --gpus all --db /tmp/g/grid.db > /tmp/g/run.txt 2>&1
else
  cp s14grid/grid.db /tmp/g/grid.db
  log "grid run, resumed"
  FUSEBENCH_AUTOTUNE_LOG=/tmp/g/autotune.log timeout -k 10 $(( $(left) - 20 )) python -m fusebench run \
    --resume $RESUME --metrics none --gpus all --db /tmp/g/grid.db > /tmp/g/run.txt 2>&1
fi
log "exit $?"; tail -5 /tmp/g/run.txt | tee -a $OUT/log.txt
cp /tmp/g/grid.db $OUT/grid.db
tail -c 300000 /tmp/g/run.txt | gzip > $OUT/run-tail.txt.gz
gzip -c /tmp/g/autotune.log > $OUT/autotune.log.gz
log done
