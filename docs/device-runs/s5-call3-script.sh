#!/usr/bin/env bash
# session 5, call 3 (4x H200): GPU0 resume of the horizontal_reduction_reduction grid (call 2's run 3),
# bias_dropout_add_transposed small shapes, ncu traffic at 8192x8192 for the 11 memory-bound cases;
# GPUs 1-3 the 6 matmul shapes whose pruning changed, then gemm_configs at two more shapes.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-330}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs; mkdir -p $L
( while true; do sleep 30; tar czf $OUT/logs.tgz -C /tmp logs; done ) &
TARPID=$!
FB="python -m fusebench"
cp out/s5-gpu0.db $OUT/gpu0.db
SMALL=1024x128,1024x256,1024x4096,1024x512,128x1024,128x128,128x16384,128x2048,128x256,128x32768,128x4096,128x65536,128x8192,2048x128,256x1024,256x128,256x256,256x4096,256x512,256x65536,256x8192,32768x128,4096x1024,4096x512,512x1024,512x128,512x16384,512x2048,512x256,512x4096,512x512,8192x1024,8192x256,8192x512
MM=1024x8192x8192,16384x512x512,2048x4096x4096,4096x2048x2048,512x16384x16384,8192x1024x1024
(
  export FUSEBENCH_AUTOTUNE_LOG=$L/autotune-gpu0.log
  timeout -k 15 $(( $(left) - 200 )) $FB run --resume 3 --gpus 0 --db $OUT/gpu0.db > $L/hrr-resume.txt 2>&1
  timeout -k 15 $(( $(left) - 100 )) $FB run bias_dropout_add_transposed --shapes $SMALL --impl inductor,triton --gpus 0 --db $OUT/gpu0.db > $L/bdat.txt 2>&1
  timeout -k 15 $(( $(left) - 5 )) $FB run pointwise_chain softmax double_softmax softmax_backward layernorm norm_chain horizontal_reduction_pointwise horizontal_reduction_reduction bias_gelu bias_dropout_add bias_dropout_add_transposed --shapes 8192x8192 --impl triton --ncu --gpus 0 --db $OUT/gpu0.db > $L/ncu.txt 2>&1
) &
P0=$!
(
  for dt in fp16 bf16; do
    timeout -k 15 $(( $(left) - 60 )) $FB run matmul_add matmul_relu matmul_add_relu --shapes $MM --dtype $dt --impl eager,triton,torch-mm --gpus 1,2,3 --db $OUT/matmul.db > $L/mm-$dt.txt 2>&1
  done
  CUDA_VISIBLE_DEVICES=1 timeout -k 10 $(( $(left) - 5 )) python bench/gemm_configs.py --shapes 256x8192x8192,512x4096x4096 --csv $OUT/gemm_configs.csv > $L/gemm-configs.txt 2>&1
) &
P1=$!
wait $P0 $P1
kill $TARPID; tar czf $OUT/logs.tgz -C /tmp logs
ls -la $OUT; echo "elapsed $(( $(date +%s) - T0 ))s"
