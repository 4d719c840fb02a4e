#!/usr/bin/env bash
# session 20, call 5 (one GPU): the horizontal cases' grid cells below 0.95x Inductor in calls
# 2-3's H100 grids, timed in pairs (150 rounds).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
log pairs
timeout -k 5 ${PAIR_S:-65} python bench/paired.py horizontal_reduction_pointwise 512x512,512x1024,512x8192,2048x2048 \
  --impls triton,inductor --rounds 150 --csv $OUT/paired.csv 2>&1 | grep -v Warning | tail -12 | tee -a $OUT/log.txt
log pairs2
timeout -k 5 ${PAIR_S:-65} python bench/paired.py horizontal_reduction_reduction 128x512,128x1024,4096x1024,1024x4096 \
  --impls triton,inductor --rounds 150 --csv $OUT/paired.csv 2>&1 | grep -v Warning | tail -12 | tee -a $OUT/log.txt
log done
