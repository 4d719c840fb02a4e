#!/usr/bin/env bash
# session 7, call 7 (4x H200): the small shapes (<= 64 MiB per tensor) still missing from the
# session-6 re-measurement with the evict_last flush: bias_gelu's 64, double_softmax's last 4,
# horizontal_reduction_pointwise's last 2, and pointwise_chain 256x128 again (0.945x in session 6).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-300}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs7; mkdir -p $L /tmp/dbs7
SMALL=$(python -c "print(','.join(f'{2**a}x{2**b}' for a in range(7, 17) for b in range(7, 17) if a + b <= 24))")
run() { # gpu, case, shapes
  timeout -k 10 $(( $(left) - 10 )) python -m fusebench run $2 --shapes $3 --impl eager,inductor,triton --gpus $1 \
    --db /tmp/dbs7/small-$2.db > $L/small-$2.txt 2>&1
}
P=()
run 0 bias_gelu $SMALL & P+=($!)
run 1 double_softmax 32768x256,32768x512,65536x128,65536x256 & P+=($!)
run 2 horizontal_reduction_pointwise 65536x128,65536x256 & P+=($!)
run 3 pointwise_chain 256x128,128x128,128x256,512x128 & P+=($!)
wait ${P[@]}
cp /tmp/dbs7/*.db $OUT/
tar czf $OUT/logs.tgz -C /tmp logs7
echo "elapsed $(( $(date +%s) - T0 ))s"
