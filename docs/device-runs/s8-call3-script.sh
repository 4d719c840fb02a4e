#!/usr/bin/env bash
# session 8, call 3 (4x H200): the GPU tests of the memory-bound kernels (double_softmax now keeps
# four power sums in every long-row plan), then `fusebench run` of the five two-pass cases at 65536
# columns (512-16384 rows) and 32768 columns (1024-16384 rows) with eager, Inductor and our kernels,
# autotuned over the candidates that now include the streamed plans.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-540}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs8c; mkdir -p $L /tmp/dbs8c
S64=512x65536,1024x65536,2048x65536,4096x65536,8192x65536,16384x65536
S32=1024x32768,2048x32768,4096x32768,8192x32768,16384x32768
fb() { # gpu, case, shapes, tag
  CUDA_VISIBLE_DEVICES=$1 FUSEBENCH_AUTOTUNE_LOG=$L/autotune-$2-$4.log timeout -k 10 $(( $(left) - 10 )) \
    python -m fusebench run $2 --shapes $3 --impl eager,inductor,triton --gpus 0 --db /tmp/dbs8c/$2-$4.db > $L/run-$2-$4.txt 2>&1
}
P=()
(CUDA_VISIBLE_DEVICES=0 timeout -k 10 240 python -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_membound.py \
   > $L/gpu-tests-membound.txt 2>&1
 fb 0 double_softmax $S64 64) & P+=($!)
(fb 1 softmax $S64 64; fb 1 softmax $S32 32; fb 1 double_softmax $S32 32) & P+=($!)
(fb 2 norm_chain $S64 64; fb 2 norm_chain $S32 32; fb 2 softmax_backward $S32 32) & P+=($!)
(fb 3 softmax_backward $S64 64; fb 3 layernorm $S32 32; fb 3 layernorm $S64 64) & P+=($!)
wait ${P[@]}
cp /tmp/dbs8c/*.db $OUT/ 2>/dev/null
tar czf $OUT/logs.tgz -C /tmp logs8c
tail -2 $L/gpu-tests-membound.txt
grep -H "cells:" $L/run-*.txt
echo "elapsed $(( $(date +%s) - T0 ))s"
