#!/usr/bin/env bash
# session 18, call 4 (one GPU): the grid cells below 0.95x Inductor (s18 grid, 94f5e30, and
# layernorm's two of session 17), timed in pairs (bench/paired.py: triton and inductor rep by rep in
# turn, 200 rounds, a bootstrap interval of the speedup).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
pair() { log "$1 $2"; timeout -k 5 120 python bench/paired.py $1 $2 --impls triton,inductor --rounds 200 \
  --csv $OUT/paired.csv 2>&1 | grep -v Warning | tail -12 | tee -a $OUT/log.txt; }
pair norm_chain 512x256,128x512,512x8192,256x4096,2048x2048
pair softmax 256x256,1024x128
pair layernorm 512x8192,128x512
log done
