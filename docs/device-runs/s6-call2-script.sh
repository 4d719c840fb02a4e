#!/usr/bin/env bash
# session 6, call 2 (4x H200): small cells slower in a grid run than alone -- which part of a run does it?
# GPU0: in-process A/B before/after profiler and graph capture; GPUs 1-3: the same cells through the
# runner with metrics none / default / kernels only.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-200}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs; mkdir -p $L
FB="python -m fusebench"
S=128x2048,512x1024,2048x256,1024x128
( CUDA_VISIBLE_DEVICES=0 timeout -k 15 $(( $(left) - 5 )) python docs/device-runs/s6-call2-diag.py > $L/diag.txt 2>&1 ) &
P0=$!
P=()
for g in 1 2 3; do
  m=(x none default kernels); m=${m[$g]}
  ( timeout -k 15 $(( $(left) - 5 )) $FB run bias_dropout_add_transposed --shapes $S --impl eager,inductor,triton --metrics $m --gpus $g --db $OUT/run-$m.db > $L/run-$m.txt 2>&1
    timeout -k 15 $(( $(left) - 5 )) $FB run softmax_backward norm_chain --shapes 128x8192,256x4096,512x4096 --impl eager,inductor,triton --metrics $m --gpus $g --db $OUT/run-$m.db >> $L/run-$m.txt 2>&1 ) &
  P+=($!)
done
wait $P0 ${P[@]}
tar czf $OUT/logs.tgz -C /tmp logs
ls -la $OUT; echo "elapsed $(( $(date +%s) - T0 ))s"
