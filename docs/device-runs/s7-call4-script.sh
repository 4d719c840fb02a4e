#!/usr/bin/env bash
# session 7, call 4 (4x H200): call 3's best long-row plans (one program per SM, not pipelined)
# against the same with the next step's loads issued into registers before this step is used
# ("prefetched", stages=1), loop and team, for the five two-pass cases; layernorm's weight and bias
# loaded evict_last.  Hints: pass-1 loads plain, pass-2 loads and stores evict_first.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export FUSEBENCH_LOAD1_EVICT="" FUSEBENCH_LOAD2_EVICT=evict_first FUSEBENCH_STORE_EVICT=evict_first FUSEBENCH_PARAM_EVICT=evict_last
T0=$(date +%s); END=$((T0 + ${BUDGET:-400}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs4; mkdir -p $L
PLANS="loop:16384:32:132:0;loop:16384:32:132:1;loop:8192:16:132:1;loop:8192:32:132:1;loop:16384:16:132:1;loop:8192:16:132:0"
PLANS="$PLANS;team:4:16384:32:1:1;team:2:16384:32:1:1;team:4:8192:16:1:1;team:2:8192:16:1:1;team:4:8192:32:1:1;team:8:8192:32:1:1"
run() { # gpu, case
  CUDA_VISIBLE_DEVICES=$1 timeout -k 10 $(( $(left) - 15 )) python bench/long_rows.py --cases $2 \
    --shapes 1024x65536,8192x65536 --plans "$PLANS" --ncu --out $L/$2 > $L/$2.txt 2>&1
}
P=()
run 0 softmax & P+=($!)
(run 1 norm_chain; run 1 double_softmax) & P+=($!)
run 2 layernorm & P+=($!)
run 3 softmax_backward & P+=($!)
wait ${P[@]}
tar czf $OUT/logs.tgz -C /tmp logs4
echo "elapsed $(( $(date +%s) - T0 ))s"
