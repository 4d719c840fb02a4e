#!/usr/bin/env bash
# session 8, call 4 (4x H200): call 3's cells at 8192-16384 rows were disturbed -- every
# implementation, eager included, 1.5-3x slower with min/max spreads of 3-7x, in two windows of
# about 30 s while all four GPUs ran their largest shapes.  Re-measure them, two GPUs at a time,
# with nvidia-smi logging clocks, power and throttle reasons every second on all GPUs.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-300}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs8d; mkdir -p $L /tmp/dbs8d
nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -l 1 > $L/smi.csv 2>&1 & SMI=$!
fb() { # gpu, case, shapes
  CUDA_VISIBLE_DEVICES=$1 FUSEBENCH_AUTOTUNE_LOG=$L/autotune-$2.log timeout -k 10 $(( $(left) - 10 )) \
    python -m fusebench run $2 --shapes $3 --impl eager,inductor,triton --gpus 0 --db /tmp/dbs8d/retime.db \
    > $L/run-$2.txt 2>&1
}
P=()
(fb 0 softmax 8192x65536,16384x65536; fb 0 norm_chain 8192x65536,16384x32768) & P+=($!)
(sleep 2; CUDA_VISIBLE_DEVICES=1 FUSEBENCH_AUTOTUNE_LOG=$L/autotune-b.log timeout -k 10 $(( $(left) - 10 )) \
   python -m fusebench run softmax_backward --shapes 8192x65536,16384x65536,16384x32768 --impl eager,inductor,triton \
   --gpus 0 --db /tmp/dbs8d/retime-b.db > $L/run-softmax_backward.txt 2>&1
 CUDA_VISIBLE_DEVICES=1 timeout -k 10 $(( $(left) - 10 )) python -m fusebench run layernorm --shapes 16384x65536 \
   --impl eager,inductor,triton --gpus 0 --db /tmp/dbs8d/retime-b.db > $L/run-layernorm.txt 2>&1) & P+=($!)
wait ${P[@]}
kill $SMI
python -m fusebench merge /tmp/dbs8d/retime-b.db --db /tmp/dbs8d/retime.db > /dev/null
cp /tmp/dbs8d/retime.db $OUT/
tar czf $OUT/logs.tgz -C /tmp logs8d
grep -h "cells:" $L/run-*.txt
awk -F', ' 'NR>1 && $7 != "0x0000000000000000" {print}' $L/smi.csv | sort | uniq -c | sort -rn | head -5
awk -F', ' 'NR>1 {print $2, $3, $4}' $L/smi.csv | sort | uniq -c | sort -rn | head -8
echo "elapsed $(( $(date +%s) - T0 ))s"
