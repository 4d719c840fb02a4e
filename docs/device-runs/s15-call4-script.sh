#!/usr/bin/env bash
# session 15, call 4 (one H200): skewed long-row kernels, writing pass backwards, L2 hints, against the autotuned kernels and memcpy
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $OUT/probe.txt
timeout -k 5 ${BUDGET:-540} python docs/device-runs/s15-call4-probe.py 2>&1 | tee -a $OUT/probe.txt | grep -v "^\[.*skewed" | tail -150
