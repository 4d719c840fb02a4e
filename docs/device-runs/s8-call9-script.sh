#!/usr/bin/env bash
# session 8, call 9 (4x H200): the 32768-row shapes at 32768 and 65536 columns (4 and 8 GiB per
# tensor) of the five two-pass cases, last measured in session 2 with older kernels; one case per
# GPU via --gpus N, a hard stop so that the stores come back within the session's device time.
# Call 10: the same script with SH=65536x32768,65536x65536 (8 and 16 GiB per tensor).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s); END=$((T0 + ${BUDGET:-230}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs8f; mkdir -p $L /tmp/dbs8f
SH=${SH:-32768x32768,32768x65536}
fb() { # gpu, case
  FUSEBENCH_AUTOTUNE_LOG=$L/autotune-$2.log timeout -k 5 $(( $(left) - 15 )) python -m fusebench run $2 \
    --shapes $SH --impl eager,inductor,triton --gpus $1 --db /tmp/dbs8f/$2.db > $L/run-$2.txt 2>&1
}
P=()
(fb 0 softmax; fb 0 double_softmax) & P+=($!)
fb 1 norm_chain & P+=($!)
fb 2 softmax_backward & P+=($!)
fb 3 layernorm & P+=($!)
wait ${P[@]}
python -m fusebench merge /tmp/dbs8f/*.db --db /tmp/s8f.db > $L/merge.txt 2>&1
cp /tmp/s8f.db $OUT/session8-call9.db
tar czf $OUT/logs.tgz -C /tmp logs8f
grep -H "cells:" $L/run-*.txt
echo "elapsed $(( $(date +%s) - T0 ))s"
