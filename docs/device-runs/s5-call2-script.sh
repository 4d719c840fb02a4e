#!/usr/bin/env bash
# session 5, call 2 (4x H200): GPU0 compute GPU tests, attention re-run (autotune timing changed),
# horizontal_reduction_reduction grid (evict_first); GPUs 1-3 the matmul grids (new configs / pruning).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-520}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs; mkdir -p $L
( while true; do sleep 30; tar czf $OUT/logs.tgz -C /tmp logs; done ) &
TARPID=$!
FB="python -m fusebench"
(
  export CUDA_VISIBLE_DEVICES=0 FUSEBENCH_AUTOTUNE_LOG=$L/autotune-gpu0.log
  timeout -k 10 $(( $(left) - 300 )) python -m pytest -q -m gpu tests/test_kernels_compute.py > $L/gpu-tests.txt 2>&1; echo "tests rc=$?" >> $L/gpu-tests.txt
  for dt in fp16 bf16; do
    timeout -k 15 $(( $(left) - 30 )) $FB run attention --shapes 4x16x2048x128x0,4x16x2048x128x1,4x16x4096x128x0,4x16x4096x128x1,1x16x8192x128x0,1x16x8192x128x1,8x32x2048x64x0,8x32x2048x64x1 --dtype $dt --impl eager,inductor,triton,sdpa-flash,sdpa-efficient,sdpa-cudnn --gpus 0 --db $OUT/gpu0.db > $L/attn-$dt.txt 2>&1
  done
  timeout -k 15 $(( $(left) - 20 )) $FB run horizontal_reduction_reduction --shapes grid --impl eager,inductor,triton --gpus 0 --db $OUT/gpu0.db > $L/hrr.txt 2>&1
) &
P0=$!
(
  export FUSEBENCH_AUTOTUNE_LOG=$L/autotune-mm.log
  for dt in fp16 bf16; do
    timeout -k 15 $(( $(left) - 20 )) $FB run matmul_add matmul_relu matmul_add_relu --shapes grid --dtype $dt --impl eager,triton,torch-mm --gpus 1,2,3 --db $OUT/matmul.db > $L/mm-$dt.txt 2>&1
  done
) &
P1=$!
wait $P0 $P1
kill $TARPID; tar czf $OUT/logs.tgz -C /tmp logs
ls -la $OUT; echo "elapsed $(( $(date +%s) - T0 ))s"
