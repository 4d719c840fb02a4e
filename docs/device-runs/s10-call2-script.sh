#!/usr/bin/env bash
# session 10, call 2 (one H200): split plans for the horizontal cases' rows that fit on chip.
# Call 1 found horizontal_reduction_pointwise 2-3% short of 0.9 of the copy ceiling at 128 MiB with
# one 16384-column program per SM (2048x16384: 0.85) and horizontal_reduction_reduction 0.74-0.82;
# the autotuner now also tries 2-4 K-column split plans from 4096 columns.
# 1. GPU tests of the horizontal kernels (the new split candidates forced, fp32 and bf16).
# 2. Every grid shape of 4096-16384 columns (30 per case): the kernels before the change (02cad64,
#    unpacked under s10ab/old) and after it, `triton` twice each, interleaved; Inductor and the
#    same-size copy once; the autotuner's candidate timings logged.
export PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s); END=$((T0 + ${BUDGET:-540}))
left() { echo $(( END - $(date +%s) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
L=/tmp/s10c2; mkdir -p $L
SHAPES=128x4096,128x8192,128x16384,256x4096,256x8192,256x16384,512x4096,512x8192,512x16384,1024x4096,1024x8192,1024x16384,2048x4096,2048x8192,2048x16384,4096x4096,4096x8192,4096x16384,8192x4096,8192x8192,8192x16384,16384x4096,16384x8192,16384x16384,32768x4096,32768x8192,32768x16384,65536x4096,65536x8192,65536x16384
CASES="horizontal_reduction_pointwise horizontal_reduction_reduction"
log "GPU tests"
PYTHONPATH=$PWD timeout -k 5 120 python -m pytest -q -m gpu tests/test_kernels_membound.py -k horizontal \
  > $OUT/gpu-tests.txt 2>&1; log "tests exit $?"
fb() { # code dir (run from there: `python -m` puts the working directory first on sys.path), impls, tag, commit
  (cd $1 && python -c "import fusebench; print(fusebench.__file__)" > $L/$3.txt &&
   FUSEBENCH_COMMIT=$4 FUSEBENCH_AUTOTUNE_LOG=$L/autotune-$3.log timeout -k 5 $(( $(left) - 20 )) \
    python -m fusebench run $CASES --shapes $SHAPES --impl $2 --metrics none --gpus 0 --db $OUT/$3.db >> $L/$3.txt 2>&1)
  log "$3 exit $? ($(head -1 $L/$3.txt))"
}
fb $PWD/s10ab/old triton old1 02cad64
fb $PWD triton,memcpy,inductor new1 ${COMMIT:-unknown}
fb $PWD/s10ab/old triton old2 02cad64
fb $PWD triton new2 ${COMMIT:-unknown}
tar czf $OUT/logs.tgz -C /tmp s10c2
log done
