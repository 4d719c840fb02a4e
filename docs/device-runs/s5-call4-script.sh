#!/usr/bin/env bash
# session 5, call 4 (4x H200): GPUs 1-3 the 8 small matmul shapes still under 1.05x eager, with the two
# added configs; GPU0 the rest of call 3's runs 4 (transposed add, small shapes) and 5 (ncu traffic).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s); END=$((T0 + ${BUDGET:-240}))
left() { echo $(( END - $(date +%s) )); }
L=/tmp/logs; mkdir -p $L
( while true; do sleep 30; tar czf $OUT/logs.tgz -C /tmp logs; done ) &
TARPID=$!
FB="python -m fusebench"
cp out/s5-gpu0.db $OUT/gpu0.db
MM=1024x8192x8192,128x16384x16384,2048x4096x4096,256x16384x16384,256x8192x8192,512x16384x16384,512x4096x4096,512x8192x8192
(
  timeout -k 15 $(( $(left) - 130 )) $FB run --resume 4 --gpus 0 --db $OUT/gpu0.db > $L/bdat-resume.txt 2>&1
  timeout -k 15 $(( $(left) - 5 )) $FB run --resume 5 --gpus 0 --db $OUT/gpu0.db > $L/ncu-resume.txt 2>&1
) &
P0=$!
(
  for dt in fp16 bf16; do
    timeout -k 15 $(( $(left) - 10 )) $FB run matmul_add matmul_relu matmul_add_relu --shapes $MM --dtype $dt --impl eager,triton,torch-mm --gpus 1,2,3 --db $OUT/matmul.db > $L/mm-$dt.txt 2>&1
  done
) &
P1=$!
wait $P0 $P1
kill $TARPID; tar czf $OUT/logs.tgz -C /tmp logs
ls -la $OUT; echo "elapsed $(( $(date +%s) - T0 ))s"
