#!/usr/bin/env bash
# session 17, calls 5 on (one GPU): the cooperative cases' whole grids at this commit (softmax_backward
# apart: its long rows only, see s17-smbwd-script.sh), fp32,
# eager / inductor / triton / memcpy, the clean flush, as one run over several calls: the first call
# starts run 1 in .grid/grid.db, later ones carry that store back (carry .grid) and resume it.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
mkdir -p /tmp/g
CASES="${CASES:-double_softmax layernorm softmax norm_chain}"
# (a resumed run takes its selection from the store)
# The store lives in $OUT, so that it comes back even when the call is cut short.
if [ -f .grid/grid.db ]; then cp .grid/grid.db $OUT/grid.db; SELECT="--resume 1"
else SELECT="$CASES --shapes grid --impl eager,inductor,triton,memcpy"; fi
log "grid run $SELECT"
FUSEBENCH_AUTOTUNE_LOG=/tmp/g/autotune.log timeout -k 15 ${GRID_S:-530} python -m fusebench run $SELECT \
  --metrics none --db $OUT/grid.db > /tmp/g/run.txt 2>&1
log "exit $?"; tail -40 /tmp/g/run.txt >> $OUT/log.txt
gzip -c /tmp/g/autotune.log > $OUT/autotune.log.gz
log done
