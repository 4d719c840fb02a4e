#!/usr/bin/env bash
# session 7, call 5 (4x H200): the GPU tests of the memory-bound kernels, then the 65536-column
# shapes of the five two-pass cases (512 to 16384 rows: 128 MiB to 4 GiB per tensor) with eager,
# Inductor and our kernels (autotuned over the new candidates), one case per GPU.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-520}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs5; mkdir -p $L /tmp/dbs5
SH=512x65536,1024x65536,2048x65536,4096x65536,8192x65536,16384x65536
run() { # gpu, case
  FUSEBENCH_AUTOTUNE_LOG=$L/autotune-$2.log timeout -k 10 $(( $(left) - 10 )) python -m fusebench run $2 --shapes $SH \
    --impl eager,inductor,triton --gpus $1 --db /tmp/dbs5/long-$2.db > $L/long-$2.txt 2>&1
}
P=()
(CUDA_VISIBLE_DEVICES=0 timeout -k 10 240 python -m pytest -q -m gpu tests/test_kernels_membound.py > $L/gpu-tests-membound.txt 2>&1
 run 0 double_softmax) & P+=($!)
run 1 softmax & P+=($!)
run 2 norm_chain & P+=($!)
(run 3 layernorm; run 3 softmax_backward) & P+=($!)
wait ${P[@]}
cp /tmp/dbs5/*.db $OUT/
tar czf $OUT/logs.tgz -C /tmp logs5
echo "elapsed $(( $(date +%s) - T0 ))s"
