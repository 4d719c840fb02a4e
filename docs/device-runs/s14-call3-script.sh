#!/usr/bin/env bash
# session 14, call 3 (one H200): bias_dropout_add_transposed with load-hinted candidates
# (pointwise.TRANSPOSED_HINTED_PLANS) -- its GPU tests, then bench/paired.py against Inductor at the
# shapes still below or near 0.95x in call 1, twice (two processes, each autotuning afresh).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
timeout -k 5 100 python -m pytest -q tests/test_kernels_membound.py -k "transposed" > $OUT/gpu-tests.txt 2>&1
log "tests exit $?"; tail -2 $OUT/gpu-tests.txt
BDAT=128x16384,256x8192,256x16384,128x32768,4096x1024,32768x2048,512x1024,2048x2048
for i in 1 2; do
  FUSEBENCH_AUTOTUNE_LOG=$OUT/autotune-$i.log timeout -k 5 150 python bench/paired.py bias_dropout_add_transposed $BDAT \
    --rounds 300 --csv $OUT/paired.csv 2>>$OUT/paired-err.txt | tee -a $OUT/paired.txt
  log "bdat $i exit ${PIPESTATUS[0]}"
done
