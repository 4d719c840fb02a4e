#!/usr/bin/env bash
# session 19, calls 2 on (one GPU): fp32 grids at this commit, eager / inductor / triton / memcpy, the
# clean flush, as runs that go on across calls (each in its own store under $OUT; a later call
# carries .grid/ back and resumes each run from its store):
#   norm_chain: whole grid (its rows-on-chip kernel changed after session 18's grid, 0f325b5);
#   softmax_backward: whole grid (the last was session 16's, before the shared split helpers and
#                     the tagged exchange).
# With TESTS=1, afterwards, the GPU tests of the memory-bound kernels (those TEST_K selects) in the time left.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); DEADLINE=$(( T0 + ${GRID_S:-560} ))
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
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
run_or_resume norm_chain norm_chain --shapes grid --impl eager,inductor,triton,memcpy
run_or_resume smbwd softmax_backward --shapes grid --impl eager,inductor,triton,memcpy
[ -f /tmp/g/autotune.log ] && gzip -c /tmp/g/autotune.log > $OUT/autotune.log.gz
if [ "${TESTS:-0}" = 1 ]; then
  left=$(( ${TOTAL_S:-580} - $(date +%s) + T0 ))
  log "gpu tests (${left}s)"
  timeout -k 5 $left python -m pytest -q -m gpu tests/test_kernels_membound.py -k "${TEST_K:-gpu}" > $OUT/tests.txt 2>&1
  log "exit $?"; tail -8 $OUT/tests.txt | tee -a $OUT/log.txt; gzip $OUT/tests.txt
fi
log done
