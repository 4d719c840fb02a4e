#!/usr/bin/env bash
# session 20, calls 2 on (one GPU): with PROBE=1, first the probe PROBE_SCRIPT names (call 2: s20-call2-probe.py, 16-values-a-thread
# cooperative plans with the prefetch, and layernorm's weight and bias held) at long rows; then
# the horizontal cases' fp32 grids at this commit, eager / inductor / triton / memcpy, as runs
# that go on across calls (each in its own store under $OUT; a later call carries .grid/ back and
# resumes each run from its store).  Their last grids were the H200's of sessions 14-15.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); DEADLINE=$(( T0 + ${GRID_S:-570} ))
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
if [ "${PROBE:-0}" = 1 ]; then
  log probe
  PROBE_SHAPES=512x65536,1024x32768,1024x65536 timeout -k 10 ${PROBE_S:-220} \
    python docs/device-runs/${PROBE_SCRIPT:-s20-call2-probe.py} $OUT/probe.jsonl layernorm double_softmax softmax 2>&1 \
    | tee $OUT/probe.txt | tail -2
fi
mkdir -p /tmp/g
run_or_resume() {  # store name, then the selection of a new run
  local name=$1; shift; local sel="$*"
  if [ -f .grid/$name.db ]; then cp .grid/$name.db $OUT/$name.db; sel="--resume 1"; fi
  local left=$(( DEADLINE - $(date +%s) ))
  if [ $left -lt 30 ]; then log "$name: no time left"; return; fi
  log "$name: run $sel (${left}s)"
  FUSEBENCH_AUTOTUNE_LOG=/tmp/g/autotune.log timeout -k 15 $left python -m fusebench run $sel \
    --metrics none --db $OUT/$name.db > /tmp/g/$name.txt 2>&1
  log "$name: exit $?"; tail -6 /tmp/g/$name.txt >> $OUT/log.txt
}
run_or_resume hrp horizontal_reduction_pointwise --shapes grid --impl eager,inductor,triton,memcpy
run_or_resume hrr horizontal_reduction_reduction --shapes grid --impl eager,inductor,triton,memcpy
[ -f /tmp/g/autotune.log ] && gzip -c /tmp/g/autotune.log > $OUT/autotune.log.gz
log done
