#!/usr/bin/env bash
# session 9, call 3 (1x H200): A/B of the staged-tile commit cf1185a ("new", shipped to the device
# as an untracked copy of its fusebench/ package in s9ab/new) against the reverted tree ("old", the
# kernels of 7b50d2f), triton cells only, same GPU, interleaved old/new twice per case.
export PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
OLD=${OLD:-old}
L=/tmp/ab9c; mkdir -p $L
declare -A SH=(
  [softmax]=1024x16384,4096x16384,16384x16384,512x8192,4096x8192
  [norm_chain]=512x16384,2048x16384,4096x8192,1024x4096
  [layernorm]=2048x16384,4096x8192,8192x8192,16384x8192
  [double_softmax]=2048x16384,4096x8192)
T0=$(date +%s)
for round in 1 2; do
  for case in softmax norm_chain layernorm double_softmax; do
    for tag in old new; do
      pp=$PWD; [ $tag = new ] && pp=$PWD/s9ab/new:$PWD
      c=$OLD; [ $tag = new ] && c=cf1185a
      FUSEBENCH_COMMIT=$c PYTHONPATH=$pp FUSEBENCH_AUTOTUNE_LOG=$L/autotune-$tag.log timeout -k 5 120 \
        python -m fusebench run $case --shapes ${SH[$case]} --impl triton --gpus 0 \
        --db $L/$tag-$round.db > $L/run-$tag-$case-$round.txt 2>&1
      echo "$round $case $tag: $(grep 'cells:' $L/run-$tag-$case-$round.txt) $(( $(date +%s) - T0 ))s"
    done
  done
done
tar czf $OUT/ab.tgz -C /tmp ab9c
