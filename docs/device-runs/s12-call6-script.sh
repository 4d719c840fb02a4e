#!/usr/bin/env bash
# session 12, call 6 (one H200): small-call time against tensor placement (s12-call6-placement-probe.py).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
timeout -k 5 300 python docs/device-runs/s12-call6-placement-probe.py > $OUT/placement-probe.txt 2>&1
echo "exit $?"; tail -3 $OUT/placement-probe.txt
