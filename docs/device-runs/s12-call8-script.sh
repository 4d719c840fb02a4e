#!/usr/bin/env bash
# session 12, calls 8 and 9 (4x H200): the eleven memory-bound cases at every grid shape of at most
# 2**25 elements (72 of the 100; the others are above the warm call's reach or at its edge, and
# were timed the same way in session 11's grid) -- eager, inductor, triton, fp32 -- with the warm
# call after each flush, for the geometric means and the 0.95x-Inductor check.  Call 8 starts the
# run; call 9 resumes it from the store call 8 returned (RESUME=run id, carried in s12grid/grid.db).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s); END=$((T0 + ${BUDGET:-560}))
left() { echo $(( END - $(date +%s) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
mkdir -p /tmp/g
if [ -z "$RESUME" ]; then
  SHAPES=$(python -c "
from fusebench.cases.base import get_case
print(','.join(f'{m}x{n}' for m, n in get_case('pointwise_chain').grid_shapes if m * n <= 2**25))")
  CASES="pointwise_chain softmax double_softmax softmax_backward layernorm norm_chain
         horizontal_reduction_pointwise horizontal_reduction_reduction bias_gelu bias_dropout_add
         bias_dropout_add_transposed"
  log "grid run"
  FUSEBENCH_AUTOTUNE_LOG=/tmp/g/autotune.log timeout -k 10 $(( $(left) - 15 )) python -m fusebench run $CASES \
    --shapes $SHAPES --dtype fp32 --impl eager,inductor,triton --metrics none --gpus all --db /tmp/g/grid.db \
    > /tmp/g/run.txt 2>&1
else
  cp s12grid/grid.db /tmp/g/grid.db
  log "grid run, resumed"
  FUSEBENCH_AUTOTUNE_LOG=/tmp/g/autotune.log timeout -k 10 $(( $(left) - 15 )) python -m fusebench run \
    --resume $RESUME --metrics none --gpus all --db /tmp/g/grid.db > /tmp/g/run.txt 2>&1
fi
log "exit $?"; tail -5 /tmp/g/run.txt | tee -a $OUT/log.txt
cp /tmp/g/grid.db $OUT/grid.db
tail -c 400000 /tmp/g/run.txt > $OUT/run-tail.txt
gzip -c /tmp/g/autotune.log > $OUT/autotune.log.gz
log done
