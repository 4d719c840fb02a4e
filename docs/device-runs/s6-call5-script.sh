#!/usr/bin/env bash
# session 6, call 5 (4x H200): the evict_last L2 flush.  GPU0: bench/cold_start.py with both flush
# modes (and the copy curve under the new flush), then layernorm's small shapes; GPUs 1-3 the small
# shapes (tensors <= 64 MiB: the 64 grid shapes with M*N <= 2**24) of the transposed add,
# softmax_backward and norm_chain, eager / inductor / triton, each case in its own store.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-400}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs; mkdir -p $L
( while true; do sleep 30; tar czf $OUT/logs.tgz -C /tmp logs; done ) &
TARPID=$!
FB="python -m fusebench"
SMALL=$(python -c "print(','.join(f'{2**a}x{2**b}' for a in range(7, 17) for b in range(7, 17) if a + b <= 24))")
CELLS=bias_dropout_add_transposed:128x2048,bias_dropout_add_transposed:512x1024,softmax_backward:256x4096,norm_chain:512x4096,layernorm:512x8192,horizontal_reduction_reduction:2048x4096,softmax:128x8192
(
  ( export CUDA_VISIBLE_DEVICES=0 TRITON_CACHE_DIR=/tmp/cs-triton TORCHINDUCTOR_CACHE_DIR=/tmp/cs-inductor
    timeout -k 15 120 python bench/cold_start.py --cells $CELLS > $L/cold-start.txt 2>&1 )
  timeout -k 15 $(( $(left) - 10 )) $FB run layernorm --shapes $SMALL --impl eager,inductor,triton --gpus 0 --db $OUT/small-layernorm.db > $L/small-layernorm.txt 2>&1
) &
P0=$!
P=()
g=1
for c in bias_dropout_add_transposed softmax_backward norm_chain; do
  timeout -k 15 $(( $(left) - 10 )) $FB run $c --shapes $SMALL --impl eager,inductor,triton --gpus $g --db $OUT/small-$c.db > $L/small-$c.txt 2>&1 &
  P+=($!); g=$((g + 1))
done
wait $P0 ${P[@]}
kill $TARPID; tar czf $OUT/logs.tgz -C /tmp logs
grep -v -i warn $L/cold-start.txt | head -20
ls -la $OUT; echo "elapsed $(( $(date +%s) - T0 ))s"
