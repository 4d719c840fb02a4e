#!/usr/bin/env bash
# session 8, call 5 (4x H200): calls 2-4 ran every `fusebench run` on the machine's GPU 0 at once
# (`CUDA_VISIBLE_DEVICES=N fusebench run --gpus 0`: the worker replaced the inherited variable with
# "0"; fixed in fusebench/runner/scheduler.py).  Their cells are discarded; the same selection again,
# one GPU per job via --gpus N, nvidia-smi logging every GPU's clock and power every second:
# the five two-pass cases at 65536 (512-16384 rows) and 32768 columns (1024-16384 rows), and the
# shapes > 64 MiB whose stored numbers below 0.9 of copy predate the corrected L2 flush.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s); END=$((T0 + ${BUDGET:-540}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs8e; mkdir -p $L /tmp/dbs8e
nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,utilization.gpu \
  --format=csv -l 1 > $L/smi.csv 2>&1 & SMI=$!
S64=512x65536,1024x65536,2048x65536,4096x65536,8192x65536,16384x65536
S32=1024x32768,2048x32768,4096x32768,8192x32768,16384x32768
fb() { # gpu, case, shapes, tag
  FUSEBENCH_AUTOTUNE_LOG=$L/autotune-$2-$4.log timeout -k 10 $(( $(left) - 10 )) python -m fusebench run $2 \
    --shapes $3 --impl eager,inductor,triton --gpus $1 --db /tmp/dbs8e/$2-$4.db > $L/run-$2-$4.txt 2>&1
}
P=()
(fb 0 softmax $S64 64; fb 0 softmax $S32 32; fb 0 double_softmax $S32 32; fb 0 layernorm 4096x8192,4096x16384,8192x4096,16384x2048,2048x16384 old) & P+=($!)
(fb 1 norm_chain $S64 64; fb 1 norm_chain $S32 32; fb 1 softmax_backward $S32 32; fb 1 norm_chain 8192x4096 old
 fb 1 softmax_backward 8192x4096 old; fb 1 double_softmax 2048x16384 old) & P+=($!)
(fb 2 softmax_backward $S64 64; fb 2 layernorm $S32 32; fb 2 layernorm $S64 64) & P+=($!)
(fb 3 double_softmax $S64 64
 fb 3 horizontal_reduction_reduction 512x65536,1024x32768,2048x16384,32768x1024,65536x512,8192x4096,4096x8192,16384x2048,1024x65536,2048x32768,4096x16384 old
 fb 3 horizontal_reduction_pointwise 512x65536,1024x32768,2048x16384,1024x65536,8192x4096,16384x2048,4096x8192,65536x512,2048x32768 old) & P+=($!)
wait ${P[@]}
kill $SMI
python -m fusebench merge /tmp/dbs8e/*.db --db /tmp/s8e.db > $L/merge.txt 2>&1
cp /tmp/s8e.db $OUT/session8-call5.db
tar czf $OUT/logs.tgz -C /tmp logs8e
grep -H "cells:" $L/run-*.txt
awk -F', ' 'NR>1 {busy[$2] += ($6+0 > 0)} END {for (g in busy) print "GPU", g, "busy seconds", busy[g]}' $L/smi.csv
echo "elapsed $(( $(date +%s) - T0 ))s"
