#!/usr/bin/env bash
# session 18, calls 2 on (one GPU): fp32 grids at this commit, eager / inductor / triton / memcpy, the
# clean flush, as runs that go on across calls (each in its own store under $OUT; a later call
# carries .grid/ back and resumes each run from its store):
#   layernorm: the 32768- and 65536-row shapes session 17 did not reach, and the 32768- and
#              65536-column shapes again (its cooperative plans that hold weight and bias are new);
#   softmax, norm_chain: whole grids (none on an H100 before).
# First (TESTS=1) the GPU test that forces every split, cooperative, streamed and re-reading plan.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); DEADLINE=$(( T0 + ${GRID_S:-540} ))
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
mkdir -p /tmp/g
if [ "${TESTS:-0}" = 1 ]; then
  log "gpu tests"
  timeout -k 5 ${TEST_S:-150} python -m pytest -q -m gpu tests/test_kernels_membound.py -k cooperative_and_streamed \
    > $OUT/tests.txt 2>&1
  log "exit $?"; tail -8 $OUT/tests.txt | tee -a $OUT/log.txt
fi
LN_SHAPES=$(python -c "
print(','.join([f'{m}x{n}' for m in (32768, 65536) for n in [2**i for i in range(7, 17)]]
               + [f'{m}x{n}' for n in (32768, 65536) for m in [2**i for i in range(7, 15)]]))")
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
run_or_resume layernorm layernorm --shapes $LN_SHAPES --impl eager,inductor,triton,memcpy
run_or_resume softmax softmax norm_chain --shapes grid --impl eager,inductor,triton,memcpy
gzip -c /tmp/g/autotune.log > $OUT/autotune.log.gz
log done
