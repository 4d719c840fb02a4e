#!/usr/bin/env bash
# session 6, call 4 (4x H200): placement sensitivity of small cells, on two GPUs (two processes).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
L=/tmp/logs; mkdir -p $L
( CUDA_VISIBLE_DEVICES=0 timeout -k 10 150 python docs/device-runs/s6-call4-diag.py > $L/diag4-a.txt 2>&1 ) &
P0=$!
( CUDA_VISIBLE_DEVICES=1 timeout -k 10 150 python docs/device-runs/s6-call4-diag.py > $L/diag4-b.txt 2>&1 ) &
P1=$!
wait $P0 $P1
tar czf $OUT/logs.tgz -C /tmp logs
grep -v -i warn $L/diag4-a.txt; grep -v -i warn $L/diag4-b.txt | grep median
