#!/usr/bin/env bash
# session 19, call 6 (one GPU): s19-call6-probe.py, double_softmax and softmax at long rows.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
log probe
PROBE_SHAPES=512x65536,1024x65536,2048x65536,1024x32768 timeout -k 10 ${PROBE_S:-200} \
  python docs/device-runs/s19-call6-probe.py $OUT/probe.jsonl double_softmax softmax 2>&1 | tee $OUT/probe.txt | tail -2
log done
