#!/usr/bin/env bash
# session 16, call 2 (one GPU): softmax_backward's whole grid at this commit (its tile and looped
# kernels drop their column masks where the row is a whole number of steps, and Inductor's
# two-pass shape is a candidate), fp32, eager / inductor / triton / memcpy, the clean flush; then
# Nsight Compute DRAM bytes of our kernel at 8192x8192 and at 1024x32768 (the new plan's re-read).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
mkdir -p /tmp/g
log "grid run"
FUSEBENCH_AUTOTUNE_LOG=/tmp/g/autotune.log timeout -k 10 ${GRID_S:-420} python -m fusebench run softmax_backward \
  --shapes grid --impl eager,inductor,triton,memcpy --metrics none --db /tmp/g/grid.db > /tmp/g/run.txt 2>&1
log "exit $?"; tail -60 /tmp/g/run.txt >> $OUT/log.txt
cp /tmp/g/grid.db $OUT/grid.db
log "ncu"
timeout -k 5 ${NCU_S:-100} python -m fusebench run softmax_backward --shapes 8192x8192,1024x32768 --impl triton \
  --ncu --metrics none --db $OUT/ncu.db > /tmp/g/ncu.txt 2>&1
log "exit $?"; tail -20 /tmp/g/ncu.txt >> $OUT/log.txt
gzip -c /tmp/g/autotune.log > $OUT/autotune.log.gz
log done
