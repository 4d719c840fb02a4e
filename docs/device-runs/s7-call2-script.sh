#!/usr/bin/env bash
# session 7, call 2 (4x H200): why do the long-row plans re-read DRAM?  norm_chain and softmax at
# 1024x65536 and 8192x65536, a set of loop and team plans (persistent or not, pipelined or not,
# parts of 1-4 steps), under four cache-hint settings (one per GPU), with Nsight Compute's DRAM bytes.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$(date +%s); END=$((T0 + ${BUDGET:-400}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs; mkdir -p $L
PLANS="loop:8192:16:0:0;loop:8192:16:132:0;loop:8192:16:264:0;loop:4096:8:264:0;loop:4096:8:528:0;loop:8192:16:132:3;loop:4096:8:264:3"
PLANS="$PLANS;team:8:4096:8:2:0;team:8:4096:8:2:3;team:16:4096:8:2:3;team:16:2048:4:4:0;team:16:4096:4:4:0"
PLANS="$PLANS;team:4:4096:8:2:3;team:8:8192:16:1:3;team:4:8192:16:1:3;team:4:4096:8:1:4"
run() { # gpu, name, load1 hint, load2 hint, store hint
  CUDA_VISIBLE_DEVICES=$1 FUSEBENCH_LOAD1_EVICT=$3 FUSEBENCH_LOAD2_EVICT=$4 FUSEBENCH_STORE_EVICT=$5 \
    timeout -k 10 $(( $(left) - 15 )) python bench/long_rows.py --cases norm_chain,softmax --shapes 1024x65536,8192x65536 \
    --plans "$PLANS" --ncu --out $L/$2 > $L/$2.txt 2>&1
}
P=()
run 0 hints-last-first-none evict_last evict_first "" & P+=($!)
run 1 hints-last-first-first evict_last evict_first evict_first & P+=($!)
run 2 hints-none-none-none "" "" "" & P+=($!)
run 3 hints-none-first-first "" evict_first evict_first & P+=($!)
wait ${P[@]}
for d in $L/hints-*; do [ -f $d/long_rows.csv ] && cp $d/long_rows.csv $OUT/$(basename $d).csv; done
tar czf $OUT/logs.tgz -C /tmp logs
echo "elapsed $(( $(date +%s) - T0 ))s"
