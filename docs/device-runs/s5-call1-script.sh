#!/usr/bin/env bash
# session 5, call 1 (4x H200): GPU0 GPU tests (membound); GPUs 1,2 sample of the memory-bound grid with
# evict_first; GPU3 GEMM configs at weak shapes, then Inductor's bias_dropout_add_transposed code.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-300}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs; mkdir -p $L
( while true; do sleep 30; tar czf $OUT/logs.tgz -C /tmp logs; done ) &
TARPID=$!
FB="python -m fusebench"
(
  export CUDA_VISIBLE_DEVICES=0
  timeout -k 10 $(left) python -m pytest -q -m gpu tests/test_kernels_membound.py > $L/gpu-tests.txt 2>&1; echo "tests rc=$?" >> $L/gpu-tests.txt
) &
P0=$!
(
  export FUSEBENCH_AUTOTUNE_LOG=$L/autotune.log
  timeout -k 15 $(( $(left) - 20 )) $FB run bias_dropout_add_transposed horizontal_reduction_reduction horizontal_reduction_pointwise softmax_backward norm_chain bias_gelu bias_dropout_add \
     --shapes 128x2048,512x1024,128x4096,256x8192,512x4096,1024x4096,4096x4096,8192x4096,2048x8192,512x32768,1024x32768,65536x512,512x65536,8192x8192 \
     --impl inductor,triton --gpus 1,2 --db $OUT/sample.db > $L/sample.txt 2>&1
) &
P1=$!
(
  export CUDA_VISIBLE_DEVICES=3
  timeout -k 10 $(( $(left) - 60 )) python bench/gemm_configs.py --csv $OUT/gemm_configs.csv > $L/gemm-configs.txt 2>&1
  timeout -k 10 $(( $(left) - 5 )) $FB show bias_dropout_add_transposed --shape 512x1024 --impl inductor --code-lines 0 > $L/bdat-inductor.txt 2>&1
) &
P2=$!
wait $P0 $P1 $P2
kill $TARPID; tar czf $OUT/logs.tgz -C /tmp logs
ls -la $OUT; echo "elapsed $(( $(date +%s) - T0 ))s"
