#!/usr/bin/env bash
# session 13, call 8 (one H200): Inductor's own config (1 row, 2048-column steps, 16 warps) added
# to the horizontal kernels' candidates -- paired timing against Inductor at the shapes where ours
# was below it, and the horizontal kernels' GPU tests.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
timeout -k 5 150 python -m pytest -q -m gpu tests/test_kernels_membound.py -k "horizontal" > $OUT/gpu-tests.txt 2>&1
echo "tests exit $?"; tail -2 $OUT/gpu-tests.txt
FUSEBENCH_AUTOTUNE_LOG=$OUT/autotune.log timeout -k 5 200 python bench/paired.py horizontal_reduction_pointwise \
  512x8192,512x16384,256x8192,1024x8192,512x4096 --rounds 300 --csv $OUT/paired.csv | tee $OUT/paired.txt
timeout -k 5 120 python bench/paired.py horizontal_reduction_reduction 512x8192,1024x8192 --rounds 300 \
  --csv $OUT/paired.csv | tee -a $OUT/paired.txt
grep -i "chose\|best\|->" $OUT/autotune.log | head -20
