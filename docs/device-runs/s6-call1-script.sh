#!/usr/bin/env bash
# session 6, call 1 (4x H200): GPU0 bench/cold_start.py (where small kernels' time goes after the L2
# flush; SASS memory-op order; copy rate per size), then Nsight Compute on two small cells and the
# transposed-add GPU tests; GPUs 1-3 the bias_dropout_add_transposed grid after the load-order change.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-420}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs; mkdir -p $L
( while true; do sleep 30; tar czf $OUT/logs.tgz -C /tmp logs; done ) &
TARPID=$!
FB="python -m fusebench"
(
  export CUDA_VISIBLE_DEVICES=0
  ( export TRITON_CACHE_DIR=/tmp/cs-triton TORCHINDUCTOR_CACHE_DIR=/tmp/cs-inductor
    timeout -k 15 $(( $(left) - 150 )) python bench/cold_start.py > $L/cold-start.txt 2>&1 )
  for c in "softmax_backward 128x4096" "norm_chain 256x4096"; do
    for i in triton inductor; do
      timeout -k 15 $(( $(left) - 90 )) $FB show $c --impl $i --ncu --code-lines 80 > $L/show-${c// /-}-$i.txt 2>&1
    done
  done
  timeout -k 15 $(( $(left) - 5 )) python -m pytest -q -m gpu tests/test_kernels_membound.py -k "transposed" > $L/gpu-tests.txt 2>&1
) &
P0=$!
timeout -k 15 $(( $(left) - 10 )) $FB run bias_dropout_add_transposed --shapes grid --impl eager,inductor,triton --gpus 1,2,3 --db $OUT/bdat.db > $L/bdat-grid.txt 2>&1 &
P1=$!
wait $P0 $P1
kill $TARPID; tar czf $OUT/logs.tgz -C /tmp logs
ls -la $OUT; echo "elapsed $(( $(date +%s) - T0 ))s"
