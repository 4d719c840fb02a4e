#!/usr/bin/env bash
# session 6, call 7 (4x H200): the small shapes (tensors <= 64 MiB) of four more cases with the
# evict_last flush, one case per GPU, until the budget ends (cells are stored as they finish).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-230}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs7; mkdir -p $L /tmp/dbs7
SMALL=$(python -c "print(','.join(f'{2**a}x{2**b}' for a in range(7, 17) for b in range(7, 17) if a + b <= 24))")
P=()
g=0
for c in softmax double_softmax horizontal_reduction_pointwise horizontal_reduction_reduction; do
  timeout -k 10 $(( $(left) - 12 )) python -m fusebench run $c --shapes $SMALL --impl eager,inductor,triton --gpus $g --db /tmp/dbs7/small-$c.db > $L/small-$c.txt 2>&1 &
  P+=($!); g=$((g + 1))
done
wait ${P[@]}
cp /tmp/dbs7/*.db $OUT/
tar czf $OUT/logs.tgz -C /tmp logs7
ls -la $OUT; echo "elapsed $(( $(date +%s) - T0 ))s"
