#!/usr/bin/env bash
# session 7, call 6 (4x H200): the 32768-column shapes over 64 MiB per tensor (1024 to 16384 rows)
# of the five two-pass cases, whose long-row candidates changed in call 5's commit, with eager,
# Inductor and our kernels (autotuned over the new candidates), one case per GPU.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-520}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs6; mkdir -p $L /tmp/dbs6
SH=1024x32768,2048x32768,4096x32768,8192x32768,16384x32768
run() { # gpu, case
  FUSEBENCH_AUTOTUNE_LOG=$L/autotune-$2.log timeout -k 10 $(( $(left) - 10 )) python -m fusebench run $2 --shapes $SH \
    --impl eager,inductor,triton --gpus $1 --db /tmp/dbs6/l32k-$2.db > $L/l32k-$2.txt 2>&1
}
P=()
run 0 softmax & P+=($!)
(run 1 norm_chain; run 1 double_softmax) & P+=($!)
run 2 layernorm & P+=($!)
run 3 softmax_backward & P+=($!)
wait ${P[@]}
cp /tmp/dbs6/*.db $OUT/
tar czf $OUT/logs.tgz -C /tmp logs6
echo "elapsed $(( $(date +%s) - T0 ))s"
