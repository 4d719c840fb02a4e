#!/usr/bin/env bash
# session 8, call 1 (4x H200): the new "stream" plans (one chain of steps per persistent program,
# next loads in flight across pass and row boundaries, a row's last chunk written from registers)
# against session 7's best plans, at few and many 65536-column rows and at 32768 columns; DRAM bytes
# by Nsight Compute.  Then the GPU test forcing every cooperative and streamed plan.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$(date +%s); END=$((T0 + ${BUDGET:-420}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs8a; mkdir -p $L
S64=512x65536,2048x65536,8192x65536
S32=1024x32768,4096x32768
ONE="loop:16384:32:132:1;stream:16384:32:1;stream:8192:32:1;stream:8192:16:1;stream:4096:16:2"
LN="loop:8192:32:132:1;stream:8192:32:1;stream:8192:16:1;stream:4096:16:1"
BWD="coop:4096:8:4:0;loop:8192:32:132:1;stream:8192:32:1;stream:8192:16:1;stream:4096:16:1;stream:4096:16:2"
DBL="loop:8192:16:132:1;stream:4096:16:1;stream:4096:32:1;stream:4096:8:1;stream:2048:8:2"
run() { # gpu, case, shapes, plans, tag
  CUDA_VISIBLE_DEVICES=$1 timeout -k 10 $(( $(left) - 10 )) python bench/long_rows.py --cases $2 \
    --shapes $3 --plans "$4" --ncu --out $L/$2-$5 > $L/$2-$5.txt 2>&1
}
P=()
(run 0 softmax $S64 "$ONE" 64; run 0 softmax $S32 "$ONE;tile:1:32" 32; run 0 double_softmax $S64 "$DBL" 64) & P+=($!)
(run 1 norm_chain $S64 "$ONE" 64; run 1 norm_chain $S32 "$ONE;tile:1:32" 32; run 1 double_softmax $S32 "$DBL;tile:1:32" 32) & P+=($!)
(run 2 layernorm $S64 "$LN" 64; run 2 layernorm $S32 "$LN;tile:1:32" 32) & P+=($!)
(run 3 softmax_backward $S64 "$BWD" 64; run 3 softmax_backward $S32 "$BWD;tile:1:32" 32;
 CUDA_VISIBLE_DEVICES=3 timeout -k 10 $(( $(left) - 5 )) python -m pytest -q -p no:cacheprovider \
   tests/test_kernels_membound.py -k "gpu_cooperative_and_streamed" > $L/gpu-tests.txt 2>&1) & P+=($!)
wait ${P[@]}
for f in $L/*/long_rows.csv; do d=$(basename $(dirname $f)); cp $f $L/$d.csv; done
tar czf $OUT/logs.tgz -C /tmp logs8a
tail -3 $L/gpu-tests.txt
grep -h "of copy" $L/*.txt | sort | cut -c1-200
echo "elapsed $(( $(date +%s) - T0 ))s"
