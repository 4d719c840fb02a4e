#!/usr/bin/env bash
# session 15, call 1 (one H200): pipelined cooperative rows against the autotuned kernels and memcpy
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $OUT/probe.txt
timeout -k 5 ${BUDGET:-520} python docs/device-runs/s15-call1-probe.py 2>&1 | tee -a $OUT/probe.txt | tail -120
