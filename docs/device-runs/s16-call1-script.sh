#!/usr/bin/env bash
# session 16, call 1 (one GPU): softmax_backward with unmasked steps (utils.within) and Inductor's
# two-pass shape among its candidates (one 32-warp program per row, 32768-column steps).
#  1. the GPU tests of softmax_backward, and the offline spill check with this machine's ptxas;
#  2. the long-row shapes of its grid, eager / inductor / triton / memcpy, into a store;
#  3. paired triton vs inductor at 32768 columns (session 15: 0.948-0.958x).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
mkdir -p /tmp/g
log "GPU tests"
timeout -k 5 150 python -m pytest -q tests/test_kernels_membound.py -k "softmax_backward or spill" > $OUT/gpu-tests.txt 2>&1
log "tests exit $?"; tail -3 $OUT/gpu-tests.txt | tee -a $OUT/log.txt
timeout -k 5 60 python -m fusebench.kernels.sass --usage > $OUT/usage.json 2>&1; cat $OUT/usage.json >> $OUT/log.txt
log "grid cells"
FUSEBENCH_AUTOTUNE_LOG=/tmp/g/autotune.log timeout -k 10 240 python -m fusebench run softmax_backward \
  --shapes 1024x32768,2048x32768,4096x32768,8192x32768,512x65536,1024x65536,2048x65536,4096x65536 \
  --impl eager,inductor,triton,memcpy --metrics none --db /tmp/g/smbwd.db > /tmp/g/run.txt 2>&1
log "run exit $?"; tail -40 /tmp/g/run.txt >> $OUT/log.txt
cp /tmp/g/smbwd.db $OUT/smbwd.db
log "paired"
FUSEBENCH_AUTOTUNE_LOG=/tmp/g/autotune-paired.log timeout -k 5 150 python bench/paired.py softmax_backward \
  1024x32768,2048x32768,4096x32768 --impls triton,inductor --rounds 200 --csv $OUT/paired.csv 2>&1 \
  | grep -v "^  *[0-9.]* ms" | tee $OUT/paired.txt
cat /tmp/g/autotune.log /tmp/g/autotune-paired.log 2>/dev/null | gzip > $OUT/autotune.log.gz
log done
