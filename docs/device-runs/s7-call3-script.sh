#!/usr/bin/env bash
# session 7, call 3 (4x H200): call 2 found the persistent, unpipelined loop (one program per SM)
# re-reading only ~1.1x with evict_first stores; here: bigger steps / more warps for more bytes in
# flight, and team plans with one program per SM, for all five two-pass cases (hints: pass-1 loads
# plain, pass-2 loads and stores evict_first), with Nsight Compute's DRAM bytes.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export FUSEBENCH_LOAD1_EVICT="" FUSEBENCH_LOAD2_EVICT=evict_first FUSEBENCH_STORE_EVICT=evict_first
T0=$(date +%s); END=$((T0 + ${BUDGET:-400}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs; mkdir -p $L
PLANS="loop:8192:16:132:0;loop:16384:32:132:0;loop:16384:16:132:0;loop:8192:32:132:0;loop:8192:8:132:0;loop:16384:32:0:0"
PLANS="$PLANS;team:4:16384:32:1:0;team:2:16384:32:1:0;team:4:8192:16:1:0;team:8:8192:16:1:0;team:2:8192:16:1:0"
PLANS="$PLANS;team:8:4096:8:2:0;coop:8192:16:2:1"
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
for d in $L/*/; do [ -f $d/long_rows.csv ] && cp $d/long_rows.csv $OUT/$(basename $d).csv; done
tar czf $OUT/logs.tgz -C /tmp logs
echo "elapsed $(( $(date +%s) - T0 ))s"
