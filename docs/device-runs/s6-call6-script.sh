#!/usr/bin/env bash
# session 6, call 6 (4x H200): with the evict_last flush, the small shapes (tensors <= 64 MiB) of
# softmax_backward and norm_chain again (call 5's stores of these two did not come back), of
# bias_dropout_add and pointwise_chain; the GPU tests of both kernel families.  Stores are written
# outside $OUT (their empty worker logs would count against the files that come back) and copied at the end.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-450}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs6; mkdir -p $L /tmp/dbs
FB="python -m fusebench"
SMALL=$(python -c "print(','.join(f'{2**a}x{2**b}' for a in range(7, 17) for b in range(7, 17) if a + b <= 24))")
small() {  # case gpu
  timeout -k 15 $(( $(left) - 15 )) $FB run $1 --shapes $SMALL --impl eager,inductor,triton --gpus $2 --db /tmp/dbs/small-$1.db > $L/small-$1.txt 2>&1
}
( CUDA_VISIBLE_DEVICES=0 timeout -k 15 240 python -m pytest -q -m gpu tests/test_kernels_membound.py > $L/gpu-tests-membound.txt 2>&1
  small pointwise_chain 0 ) &
P0=$!
( small softmax_backward 1 ) &
P1=$!
( small norm_chain 2 ) &
P2=$!
( CUDA_VISIBLE_DEVICES=3 timeout -k 15 240 python -m pytest -q -m gpu tests/test_kernels_compute.py > $L/gpu-tests-compute.txt 2>&1
  small bias_dropout_add 3 ) &
P3=$!
wait $P0 $P1 $P2 $P3
cp /tmp/dbs/*.db $OUT/
tar czf $OUT/logs.tgz -C /tmp logs6
tail -3 $L/gpu-tests-*.txt
ls -la $OUT; echo "elapsed $(( $(date +%s) - T0 ))s"
