#!/usr/bin/env bash
# session 7, call 1 (4x H200): every long-row plan of the five two-pass cases at 1024x65536 and
# 8192x65536 -- checked against float64, timed as cells are, DRAM bytes from Nsight Compute --
# including the new row-team plans; then the GPU tests of the cooperative and team kernels.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$(date +%s); END=$((T0 + ${BUDGET:-500}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > $L/gpus.txt
SH=1024x65536,8192x65536
run() { # gpu, out dir, cases
  CUDA_VISIBLE_DEVICES=$1 timeout -k 10 $(( $(left) - 15 )) python bench/long_rows.py --cases $3 --shapes $SH --ncu --out $L/$2 > $L/$2.txt 2>&1
}
P=()
(run 0 softmax softmax
 CUDA_VISIBLE_DEVICES=0 timeout -k 10 $(( $(left) - 10 )) python -m pytest -q -m gpu tests/test_kernels_membound.py -k "cooperative" > $L/gpu-tests.txt 2>&1) & P+=($!)
run 1 layernorm layernorm & P+=($!)
run 2 double_softmax double_softmax & P+=($!)
(run 3 norm_chain norm_chain; run 3 softmax_backward softmax_backward) & P+=($!)
wait ${P[@]}
for c in softmax layernorm double_softmax norm_chain softmax_backward; do
  [ -f $L/$c/long_rows.csv ] && cp $L/$c/long_rows.csv $OUT/long-rows-$c.csv
done
tar czf $OUT/logs.tgz -C /tmp logs
echo "elapsed $(( $(date +%s) - T0 ))s"
