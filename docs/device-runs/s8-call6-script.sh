#!/usr/bin/env bash
# session 8, call 6 (1x H200): the read-only rate against the copy rate (s8-call6-read-rate.py).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout -k 10 200 python docs/device-runs/s8-call6-read-rate.py 2>&1 | tee $OUT/read-rate.csv | tail -40
