#!/usr/bin/env bash
# session 12, call 2 (one H200): the cold-code hypothesis (s12-call2-cold-code-probe.py).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
timeout -k 5 400 python docs/device-runs/s12-call2-cold-code-probe.py > $OUT/cold-code-probe.txt 2>&1
echo "exit $?"; tail -3 $OUT/cold-code-probe.txt
