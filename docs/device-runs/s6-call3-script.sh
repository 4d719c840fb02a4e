#!/usr/bin/env bash
# session 6, call 3 (4x H200): the runner-vs-direct timing difference, one variable at a time, two impl orders.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
L=/tmp/logs; mkdir -p $L
( CUDA_VISIBLE_DEVICES=0 timeout -k 10 170 python docs/device-runs/s6-call3-diag.py inductor,triton > $L/diag-a.txt 2>&1 ) &
P0=$!
( CUDA_VISIBLE_DEVICES=1 timeout -k 10 170 python docs/device-runs/s6-call3-diag.py triton,inductor > $L/diag-b.txt 2>&1 ) &
P1=$!
wait $P0 $P1
tar czf $OUT/logs.tgz -C /tmp logs
grep -v -i warn $L/diag-a.txt | tail -30; grep -v -i warn $L/diag-b.txt | tail -30
