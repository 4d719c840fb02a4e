#!/usr/bin/env bash
# session 9, call 2 (4x H200): the five two-pass cases' triton cells at 4096, 8192 and 16384 columns
# (256..65536 rows) with the staged tile candidates added to the autotuner's list (utils.row_plans
# staged=True), for comparison with the session-3..8 stores; the GPU tests of the memory-bound
# kernels (GPU 3, after layernorm).  One worker per GPU (--gpus N), a hard stop for the stores.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s); END=$((T0 + ${BUDGET:-500}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs9b; mkdir -p $L /tmp/dbs9b
MS="256 512 1024 2048 4096 8192 16384 32768 65536"
shapes() { local s=""; for m in $MS; do s="$s,${m}x$1"; done; echo ${s#,}; }
fb() { # gpu, case, columns
  FUSEBENCH_AUTOTUNE_LOG=$L/autotune-$2-$3.log timeout -k 5 $(( $(left) - 10 )) python -m fusebench run $2 \
    --shapes $(shapes $3) --impl triton --gpus $1 --db /tmp/dbs9b/$2-$3.db > $L/run-$2-$3.txt 2>&1
}
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,utilization.gpu --format=csv -l 2 > $L/smi.csv &
SMI=$!
P=()
(fb 0 softmax 4096; fb 0 softmax 8192; fb 0 softmax 16384; fb 0 double_softmax 16384) & P+=($!)
(fb 1 norm_chain 4096; fb 1 norm_chain 8192; fb 1 norm_chain 16384; fb 1 double_softmax 8192) & P+=($!)
(fb 2 softmax_backward 4096; fb 2 softmax_backward 8192; fb 2 softmax_backward 16384; fb 2 double_softmax 4096) & P+=($!)
(fb 3 layernorm 4096; fb 3 layernorm 8192; fb 3 layernorm 16384
 CUDA_VISIBLE_DEVICES=3 timeout -k 5 $(( $(left) - 5 )) python -m pytest -q tests/test_kernels_membound.py \
   > $L/gpu-tests.txt 2>&1) & P+=($!)
wait ${P[@]}
kill $SMI
python -m fusebench merge /tmp/dbs9b/*.db --db /tmp/s9b.db > $L/merge.txt 2>&1
cp /tmp/s9b.db $OUT/session9-call2.db
tar czf $OUT/logs.tgz -C /tmp logs9b
grep -H "cells:" $L/run-*.txt
tail -3 $L/gpu-tests.txt
echo "elapsed $(( $(date +%s) - T0 ))s"
