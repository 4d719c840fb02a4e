#!/usr/bin/env bash
# session 13, call 6 (one H200): bench/paired.py -- our Triton kernel against Inductor, timed rep by
# rep in turn (300 rounds; 100 at ~1 ms calls), at every shape where a grid cell of sessions 11-12
# had it below 0.96x Inductor (and the larger repeated losses), to decide the 0.95x criterion there.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s)
pair() {  # case shapes rounds
  timeout -k 5 150 python bench/paired.py $1 $2 --rounds $3 --csv $OUT/paired.csv 2>>$OUT/paired-err.txt \
    | tee -a $OUT/paired.txt
  echo "[$(( $(date +%s) - T0 ))s] $1 exit ${PIPESTATUS[0]}"
}
pair bias_dropout_add_transposed 2048x2048,128x16384,256x16384,32768x1024,256x8192,128x32768,32768x2048,1024x128,4096x1024,512x1024 300
pair horizontal_reduction_pointwise 512x8192,512x16384 300
pair pointwise_chain 256x1024,256x2048,1024x256 300
pair softmax_backward 2048x4096,4096x32768,1024x32768 300
pair double_softmax 512x1024 300
pair norm_chain 65536x8192 100
pair bias_dropout_add_transposed 32768x8192,65536x4096 100
