#!/usr/bin/env bash
# session 8, call 2 (4x H200): (a) layernorm's streamed plan reads its input 1.33x from DRAM where
# norm_chain's reads it 1.04x: the same plan with the weight and bias read evict_last, and without
# them (a diagnostic: wrong output, timed anyway); (b) double_softmax's streamed plan with four power
# sums instead of six; (c) the GPU tests of the memory-bound kernels; (d) `fusebench run` of the
# shapes > 64 MiB whose stored numbers below 0.9 of copy predate the corrected L2 flush (session 6):
# horizontal_reduction_pointwise/reduction, and single shapes of layernorm, norm_chain,
# softmax_backward and double_softmax -- kernels unchanged since (rows <= 16384 columns: tile plans).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-500}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs8b; mkdir -p $L /tmp/dbs8b
lr() { # gpu, case, shapes, plans, tag, env...
  local g=$1 c=$2 sh=$3 pl=$4 tag=$5; shift 5
  env CUDA_VISIBLE_DEVICES=$g LONG_ROWS_TIME_WRONG=1 "$@" timeout -k 10 $(( $(left) - 10 )) python bench/long_rows.py \
    --cases $c --shapes $sh --plans "$pl" --ncu --out $L/$c-$tag > $L/$c-$tag.txt 2>&1
}
fb() { # gpu, case, shapes
  CUDA_VISIBLE_DEVICES=$1 FUSEBENCH_AUTOTUNE_LOG=$L/autotune-$2.log timeout -k 10 $(( $(left) - 10 )) \
    python -m fusebench run $2 --shapes $3 --impl eager,inductor,triton --gpus 0 --db /tmp/dbs8b/$2.db > $L/run-$2.txt 2>&1
}
SH=512x65536,8192x65536,1024x32768
P=()
(lr 0 layernorm $SH "stream:8192:16:1;loop:8192:32:132:1" params-default
 lr 0 layernorm $SH "stream:8192:16:1;loop:8192:32:132:1" params-none FUSEBENCH_LN_PARAMS=none
 lr 0 layernorm $SH "stream:8192:16:1" params-evict-last FUSEBENCH_LN_PARAMS=evict_last) & P+=($!)
(lr 1 double_softmax $SH "stream:4096:16:1;stream:8192:16:1;stream:8192:32:1" powers6
 lr 1 double_softmax $SH "stream:4096:16:1;stream:8192:16:1;stream:8192:32:1" powers4 FUSEBENCH_DSM_POWERS=4
 fb 1 double_softmax 2048x16384; fb 1 softmax_backward 8192x4096; fb 1 norm_chain 8192x4096) & P+=($!)
(CUDA_VISIBLE_DEVICES=2 timeout -k 10 260 python -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_membound.py \
   > $L/gpu-tests-membound.txt 2>&1
 fb 2 layernorm 4096x8192,4096x16384,8192x4096,16384x2048,2048x16384) & P+=($!)
(fb 3 horizontal_reduction_reduction 512x65536,1024x32768,2048x16384,32768x1024,65536x512,8192x4096,4096x8192,16384x2048,1024x65536,2048x32768,4096x16384
 fb 3 horizontal_reduction_pointwise 512x65536,1024x32768,2048x16384,1024x65536,8192x4096,16384x2048,4096x8192,65536x512,2048x32768) & P+=($!)
wait ${P[@]}
for f in $L/*/long_rows.csv; do d=$(basename $(dirname $f)); cp $f $L/$d.csv; done
cp /tmp/dbs8b/*.db $OUT/ 2>/dev/null
tar czf $OUT/logs.tgz -C /tmp logs8b
tail -2 $L/gpu-tests-membound.txt
grep -h "of copy" $L/*.txt | grep -v "^\[" | sort | cut -c1-190
grep -h "cells:" $L/run-*.txt
echo "elapsed $(( $(date +%s) - T0 ))s"
