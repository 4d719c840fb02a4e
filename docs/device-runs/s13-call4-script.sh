#!/usr/bin/env bash
# session 13, call 4 (one H200): (1) GPU tests of the new "reread" plans (layernorm, double_softmax:
# forced, and picked by the autotuner at the test sizes), of the interleaved timing, and of the
# head start after the spin was factored out; (2) bench/long_rows.py: the reread plans against
# the streamed, looped and whole-row plans at long rows, timed and DRAM bytes counted.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
timeout -k 5 240 python -m pytest -q -m gpu tests/test_paired.py tests/test_kernels_membound.py \
  -k "paired or cooperative_and_streamed or head_start or warm_call or (gpu_sizes and (layernorm or double_softmax))" \
  > $OUT/gpu-tests.txt 2>&1
echo "tests exit $?"; tail -3 $OUT/gpu-tests.txt
run() {  # name shapes plans seconds
  timeout -k 5 $4 python bench/long_rows.py --cases layernorm,double_softmax --shapes $2 --plans "$3" --ncu \
    --out $OUT/$1 > $OUT/$1.txt 2>&1
  echo "$1 exit $?"; grep -v "^\[" $OUT/$1.txt
}
run rows64 512x65536,2048x65536,8192x65536 "reread:32768:8192:32;reread:16384:8192:32;stream:8192:16:2;stream:8192:32:1;loop:8192:32:132:1" 200
run rows32 1024x32768,4096x32768 "reread:32768:8192:32;reread:16384:8192:32;tile:1:32;tile:1:16;stream:8192:16:2" 120
