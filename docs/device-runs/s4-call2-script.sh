#!/usr/bin/env bash
# session 4, call 1 (4x H200): GPU0 tests + attention + b2b/conv; GPUs 1-3 matmul grids, then run-3 resume
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-480}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs; mkdir -p $L
( while true; do sleep 45; tar czf $OUT/logs.tgz -C /tmp logs; done ) &
TARPID=$!
cp docs/results/h200x4-session3.db $OUT/s3.db
nvidia-smi --query-gpu=index,name,memory.used --format=csv > $L/gpus.txt
(
  export FUSEBENCH_AUTOTUNE_LOG=$L/autotune-gpu0.log
  CUDA_VISIBLE_DEVICES=0 timeout $(left) python -m pytest -q -m gpu tests/test_kernels_compute.py tests/test_kernels_membound.py -q > $L/gpu-tests.txt 2>&1; echo "tests rc=$?" >> $L/gpu-tests.txt
  A=4x16x2048x128x0,4x16x2048x128x1,4x16x4096x128x0,4x16x4096x128x1,1x16x8192x128x0,1x16x8192x128x1,8x32x2048x64x0,8x32x2048x64x1
  for dt in fp16 bf16; do
    timeout $(left) python -m fusebench.cli run attention --shapes $A --dtype $dt --impl eager,inductor,triton,sdpa-flash,sdpa-efficient,sdpa-cudnn --gpus 0 --db $OUT/compute.db > $L/attn-$dt.txt 2>&1
  done
  timeout $(left) python -m fusebench.cli run matmul_matmul conv_add conv_relu conv_bn --impl eager,inductor,triton --gpus 0 --db $OUT/compute.db > $L/b2b-conv.txt 2>&1
) &
P1=$!
(
  export FUSEBENCH_AUTOTUNE_LOG=$L/autotune-mm.log
  for dt in fp16 bf16; do
    timeout $(left) python -m fusebench.cli run matmul_add matmul_relu matmul_add_relu --shapes grid --dtype $dt --impl eager,triton,torch-mm --gpus 1,2,3 --db $OUT/matmul.db > $L/mm-$dt.txt 2>&1
  done
  export FUSEBENCH_AUTOTUNE_LOG=$L/autotune-s3.log
  timeout $(left) python -m fusebench.cli run --resume 3 --gpus 1,2,3 --db $OUT/s3.db > $L/s3-resume.txt 2>&1
) &
P2=$!
wait $P1 $P2
kill $TARPID; tar czf $OUT/logs.tgz -C /tmp logs
ls -la $OUT; echo "elapsed $(( $(date +%s) - T0 ))s"
