#!/usr/bin/env bash
# session 13, call 1 (one H200): the long-row misses of layernorm, double_softmax and
# softmax_backward -- every plan that matters, timed, DRAM bytes and (second ncu pass, caches
# flushed by ncu) L2/DRAM/SM throughput, registers, spills; the new prefetching cooperative plans
# (softmax_backward and double_softmax gain the prefetch, layernorm's keeps weight and bias in
# registers).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset CUDA_VISIBLE_DEVICES
EXTRA=lts__t_sectors.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum
COOPS="coop:16384:32:1:1;coop:8192:16:1:1;coop:4096:8:2:1;coop:4096:8:4:0;coop:8192:16:2:0"
run() {  # name cases shapes plans seconds
  timeout -k 5 $5 python bench/long_rows.py --cases $2 --shapes $3 --plans "$4" --ncu --ncu-extra $EXTRA \
    --out $OUT/$1 > $OUT/$1.txt 2>&1
  echo "$1 exit $?"; grep -v "^\[" $OUT/$1.txt | head -60
}
run rows64 layernorm,double_softmax,softmax_backward 2048x65536 "stream:8192:16:2;stream:8192:32:1;loop:8192:32:132:1;$COOPS" 290
run rows32 layernorm,double_softmax,softmax_backward 1024x32768 "tile:1:32;tile:1:16;stream:8192:16:2;$COOPS" 270
