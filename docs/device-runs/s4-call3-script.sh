#!/usr/bin/env bash
# session 4, call 3 (4x H200): GPU0 horizontal grids + transposed small shapes; GPUs 1-3 run-3 resume + matmul re-run
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-440}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs; mkdir -p $L
( while true; do sleep 40; tar czf $OUT/logs.tgz -C /tmp logs; done ) &
TARPID=$!
cp out/s3.db $OUT/s3.db
FB="python -m fusebench.cli"
(
  export FUSEBENCH_AUTOTUNE_LOG=$L/autotune-gpu0.log CUDA_VISIBLE_DEVICES=0
  timeout $(left) python -m pytest -q -m gpu tests/test_kernels_membound.py tests/test_kernels_compute.py -k "(gpu_sizes and horizontal) or (gpu_matmul and splitk)" > $L/gpu-tests.txt 2>&1; echo "tests rc=$?" >> $L/gpu-tests.txt
  timeout $(left) $FB run horizontal_reduction_reduction horizontal_reduction_pointwise --shapes grid --impl inductor,triton --gpus 0 --db $OUT/membound.db > $L/horizontal.txt 2>&1
  timeout $(left) $FB run bias_dropout_add_transposed --shapes $SMALL --impl inductor,triton --gpus 0 --db $OUT/membound.db > $L/bdat.txt 2>&1
) &
P1=$!
(
  export FUSEBENCH_AUTOTUNE_LOG=$L/autotune-s3.log
  timeout $(left) $FB run --resume 3 --gpus 1,2,3 --db $OUT/s3.db > $L/s3-resume.txt 2>&1
  export TRITON_PRINT_AUTOTUNING=1
  for dt in fp16 bf16; do
    timeout $(left) $FB run matmul_add matmul_relu matmul_add_relu --shapes $MM --dtype $dt --impl eager,triton,torch-mm --gpus 1,2,3 --db $OUT/matmul.db > $L/mm-$dt.txt 2>&1
  done
) &
P2=$!
wait $P1 $P2
kill $TARPID; tar czf $OUT/logs.tgz -C /tmp logs
ls -la $OUT; echo "elapsed $(( $(date +%s) - T0 ))s"
