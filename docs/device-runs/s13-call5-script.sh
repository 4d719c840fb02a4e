#!/usr/bin/env bash
# session 13, calls 5 and 6 (4x H200): layernorm and double_softmax -- whose long-row plans changed
# (the "reread" plans) -- at every grid shape of 32768 and 65536 columns, eager, inductor, triton
# and the same-size memcpy, fp32, as the grids are timed.  Call 5 starts the run; call 6 resumes it
# from the store call 5 returned (RESUME=run id, carried in s13long/long.db).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s); END=$((T0 + ${BUDGET:-560}))
left() { echo $(( END - $(date +%s) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
mkdir -p /tmp/g
if [ -z "$RESUME" ]; then
  SHAPES=$(python -c "
from fusebench.cases.base import get_case
print(','.join(f'{m}x{n}' for m, n in get_case('layernorm').grid_shapes if n >= 32768))")
  log "run: $SHAPES"
  FUSEBENCH_AUTOTUNE_LOG=/tmp/g/autotune.log timeout -k 10 $(( $(left) - 15 )) python -m fusebench run \
    layernorm double_softmax --shapes $SHAPES --dtype fp32 --impl eager,inductor,triton,memcpy --metrics none \
    --gpus all --db /tmp/g/long.db > /tmp/g/run.txt 2>&1
else
  cp s13long/long.db /tmp/g/long.db
  log "run, resumed"
  FUSEBENCH_AUTOTUNE_LOG=/tmp/g/autotune.log timeout -k 10 $(( $(left) - 15 )) python -m fusebench run \
    --resume $RESUME --metrics none --gpus all --db /tmp/g/long.db > /tmp/g/run.txt 2>&1
fi
log "exit $?"; tail -5 /tmp/g/run.txt | tee -a $OUT/log.txt
cp /tmp/g/long.db $OUT/long.db
tail -c 400000 /tmp/g/run.txt > $OUT/run-tail.txt
gzip -c /tmp/g/autotune.log > $OUT/autotune.log.gz
log done
