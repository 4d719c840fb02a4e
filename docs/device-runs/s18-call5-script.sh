#!/usr/bin/env bash
# session 18, call 5 (one GPU): norm_chain's rows on chip now wait for one block-wide reduction, not
# three (the chain's closed form).  Its GPU size tests, then triton against inductor in pairs at the
# grid cell that was below 0.95x (512x8192) and at tile shapes across the grid.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
log "gpu tests"
timeout -k 5 60 python -m pytest -q -m gpu tests/test_kernels_membound.py -k "gpu_sizes and norm_chain" > $OUT/tests.txt 2>&1
log "exit $?"; tail -3 $OUT/tests.txt | tee -a $OUT/log.txt
log pairs
timeout -k 5 100 python bench/paired.py norm_chain 512x8192,512x256,256x4096,2048x2048,1024x16384,8192x8192,16384x1024,65536x128 \
  --impls triton,inductor --rounds 100 --csv $OUT/paired.csv 2>&1 | grep -v Warning | tail -24 | tee -a $OUT/log.txt
log done
