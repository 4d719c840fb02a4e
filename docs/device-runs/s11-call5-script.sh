#!/usr/bin/env bash
# session 11, call 5 (one H200): our looped / streamed row kernels with and without num_stages=1
# (s11-call5-stages-probe.py).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
timeout -k 5 400 python docs/device-runs/s11-call5-stages-probe.py > $OUT/stages-probe.txt 2>&1
echo "exit $?"; tail -5 $OUT/stages-probe.txt
