#!/usr/bin/env bash
# session 22 (two H100s of one host, nvidia-h100-x2), every call: phases by environment.
#   TESTS=1  GPU tests on the second GPU (the merged L2 discard kernel; layernorm's cooperative
#            launch with its launch arguments computed once; layernorm and norm_chain size tests)
#            while NCU=1 runs the traffic check on the first: every memory-bound case's
#            `triton` and `inductor` cells at 8192x8192 (fp32) under Nsight Compute.
#   GRID="store:case,case ..."  whole fp32 grids (eager / inductor / triton / memcpy, the default
#            timing: warm call's outputs dropped) over both GPUs, one case per worker at a time;
#            a store carried in .grid/ is resumed (run 1), so a grid goes on across calls.
#   PAIRED="case:shape,shape ..."  bench/paired.py triton against inductor, after the grids.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); DEADLINE=$(( T0 + ${TOTAL_S:-560} ))
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
mkdir -p /tmp/g
ALL="pointwise_chain softmax double_softmax softmax_backward layernorm norm_chain horizontal_reduction_pointwise horizontal_reduction_reduction bias_gelu bias_dropout_add bias_dropout_add_transposed"
if [ "${TESTS:-0}" = 1 ]; then
  log "tests on GPU 1"
  ( CUDA_VISIBLE_DEVICES=1 timeout -k 5 ${TEST_S:-300} python -m pytest -q -m gpu tests/test_kernels_membound.py \
      -k "discard or (gpu_sizes and (layernorm or norm_chain)) or (gpu_cooperative and layernorm)" \
      > $OUT/tests.txt 2>&1; echo "tests exit $?" >> $OUT/tests.txt ) &
  TPID=$!
fi
if [ "${NCU:-0}" = 1 ]; then
  log "ncu at 8192x8192 on GPU 0"
  sel="$ALL --impl triton,inductor --shapes 8192x8192 --dtype fp32 --metrics none --ncu"
  if [ -f .grid/ncu8192.db ]; then cp .grid/ncu8192.db $OUT/; sel="--resume 1"; fi  # (call 2 on)
  CUDA_VISIBLE_DEVICES=0 timeout -k 10 ${NCU_S:-300} python -m fusebench run $sel --db $OUT/ncu8192.db \
    > /tmp/g/ncu8192.txt 2>&1
  log "ncu exit $?"; grep -v "━" /tmp/g/ncu8192.txt | tail -4 | tee -a $OUT/log.txt
fi
if [ -n "$TPID" ]; then wait $TPID; log "$(tail -3 $OUT/tests.txt | tr '\n' ' ')"; fi
for spec in $GRID; do
  name=${spec%%:*}; cases=${spec#*:}; sel="${cases//,/ } --shapes grid --impl eager,inductor,triton,memcpy"
  if [ -f .grid/$name.db ]; then cp .grid/$name.db $OUT/$name.db; sel="--resume 1"; fi
  left=$(( DEADLINE - $(date +%s) - ${PAIRED_S:-0} ))
  if [ $left -lt 30 ]; then log "$name: no time left"; continue; fi
  log "$name: run $sel (${left}s)"
  FUSEBENCH_AUTOTUNE_LOG=/tmp/g/autotune-$name.log timeout -k 15 $left python -m fusebench run $sel \
    --metrics none --gpus all --db $OUT/$name.db > /tmp/g/$name.txt 2>&1
  log "$name: exit $?"; grep -v "━" /tmp/g/$name.txt | tail -6 >> $OUT/log.txt
done
# PAIRED_OLD=1 (call 3 on): each case twice, first with the autotuner's warm call as before this
# session (s22-call3-probe.py, PROBE_OLD_WARM=1), then as committed.
for spec in $PAIRED; do
  case=${spec%%:*}; shapes=${spec#*:}
  for old in $( [ "${PAIRED_OLD:-0}" = 1 ] && echo 1 ) 0; do
    left=$(( DEADLINE - $(date +%s) )); [ $left -lt 20 ] && { log "paired $case: no time left"; continue; }
    log "paired $case $shapes old_warm=$old (${left}s)"
    echo "== $case old_warm=$old" >> $OUT/paired.txt
    PROBE_OLD_WARM=$old timeout -k 5 $left python docs/device-runs/s22-call3-probe.py $case $shapes \
      --impls triton,inductor --rounds ${ROUNDS:-200} 2>&1 | grep -v "^  *[0-9.]* ms" >> $OUT/paired.txt
    log "paired exit $?"
  done
done
mv $OUT/*.db.log /tmp/g/ 2>/dev/null
tar -czf $OUT/logs.tgz -C /tmp/g . 2>/dev/null
log done
