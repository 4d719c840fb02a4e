#!/usr/bin/env bash
# session 21, call 1 (one GPU): s21-call1-probe.py (cooperative plans staged through shared memory)
# at long rows, the three short cases first; then layernorm's cell note (describe_plan) from one
# grid cell.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a $OUT/log.txt
python -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)" | tee -a $OUT/log.txt
log probe
PROBE_SHAPES=512x65536,1024x32768,1024x65536 timeout -k 10 ${PROBE_S:-420} \
  python docs/device-runs/s21-call1-probe.py $OUT/probe.jsonl layernorm double_softmax softmax norm_chain softmax_backward 2>&1 \
  | tee $OUT/probe.txt | tail -2
log note
timeout -k 10 90 python -m fusebench run layernorm --shapes 1024x65536 --impl triton --metrics none \
  --db /tmp/note.db > $OUT/note.txt 2>&1
python -c "
import sqlite3; c = sqlite3.connect('/tmp/note.db')
print(c.execute('select impl, shape, note from cells').fetchall())" >> $OUT/note.txt 2>&1
tail -3 $OUT/note.txt
log done
