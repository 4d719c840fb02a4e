#!/usr/bin/env bash
# session 10, call 1 (4x H200).
# A. Do four GPUs of one host measured at once slow one another?  (Session 9's call 5 meant to
#    settle it and returned nothing.)  The same 12 cells -- softmax and pointwise_chain at
#    8192x8192, 16384x16384 and 4096x65536, `triton` and the new same-size copy `memcpy` -- on
#    GPU 0 alone, then on all four GPUs at once (four processes), then on GPU 0 alone again;
#    nvidia-smi logs SM and memory clocks, power and throttle reasons every second.
# B. Every memory-bound case at every grid shape whose input exceeds 64 MiB (36 shapes x 11 cases),
#    `triton` and `memcpy`, one worker per GPU: the standing of issue 6's first target under one
#    flush, one machine, one commit, each cell beside a copy of the same bytes timed in the same run.
# Results land in $OUT as each step finishes (session 9's call 5 lost everything by packing at the end).
# First attempt of this call: a bare `wait` after the four concurrent runs also waited for the
# background nvidia-smi and hung until the call limit (as, most likely, session 9's call 5 did).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 FUSEBENCH_COMMIT=${COMMIT:-unknown}
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s); END=$((T0 + ${BUDGET:-560}))
left() { echo $(( END - $(date +%s) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/log.txt; }
A=/tmp/s10a; mkdir -p $A
nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active,utilization.gpu \
  --format=csv -l 1 > $OUT/smi.csv 2>&1 & SMI=$!
nvidia-smi -q -d CLOCK,POWER | head -60 > $A/smi-q.txt 2>&1

# --- A: alone, four at once, alone -------------------------------------------------------------
cells() { # gpu, tag
  timeout -k 5 90 python -m fusebench run softmax pointwise_chain --shapes 8192x8192,16384x16384,4096x65536 \
    --impl triton,memcpy --metrics none --gpus $1 --db $A/$2-gpu$1.db > $A/$2-gpu$1.txt 2>&1
}
log "A: solo1"; cells 0 solo1
log "A: four at once"; P=(); for g in 0 1 2 3; do cells $g conc & P+=($!); done; wait ${P[@]}  # not a bare wait: nvidia-smi runs in the background
log "A: solo2"; cells 0 solo2
python - $A/*.db > $A/concurrency.txt 2>&1 <<'PY'
import sqlite3, sys
rows = {}
for path in sys.argv[1:]:
    tag = path.rsplit("/", 1)[-1][:-3]
    for case, shape, impl, t, q20, q80 in sqlite3.connect(path).execute(
            "select case_name, shape, impl, time_us, time_q20_us, time_q80_us from cells where status='ok' and time_us > 0"):
        rows.setdefault((case, shape, impl), {})[tag] = (t, q20, q80)
tags = ["solo1-gpu0", "conc-gpu0", "conc-gpu1", "conc-gpu2", "conc-gpu3", "solo2-gpu0"]
print("case shape impl | median us per run: " + " ".join(tags) + " | each / solo mean")
for key, by in sorted(rows.items()):
    solo = [by[t][0] for t in ("solo1-gpu0", "solo2-gpu0") if t in by]
    ref = sum(solo) / len(solo) if solo else float("nan")
    print(*key, "|", " ".join(f"{by[t][0]:.2f}" if t in by else "-" for t in tags), "|",
          " ".join(f"{by[t][0] / ref:.3f}" if t in by else "-" for t in tags))
PY
cat $A/concurrency.txt | tee -a $OUT/log.txt
tar czf $OUT/concurrency.tgz -C /tmp s10a
log "A done"

# --- B: the >64 MiB standing, triton beside memcpy ---------------------------------------------
CASES="softmax_backward layernorm double_softmax softmax norm_chain horizontal_reduction_pointwise
       horizontal_reduction_reduction pointwise_chain bias_gelu bias_dropout_add bias_dropout_add_transposed"
SHAPES=65536x512,32768x1024,16384x2048,8192x4096,4096x8192,2048x16384,1024x32768,512x65536,65536x1024,32768x2048,16384x4096,8192x8192,4096x16384,2048x32768,1024x65536,65536x2048,32768x4096,16384x8192,8192x16384,4096x32768,2048x65536,65536x4096,32768x8192,16384x16384,8192x32768,4096x65536,65536x8192,32768x16384,16384x32768,8192x65536,65536x16384,32768x32768,16384x65536,65536x32768,32768x65536,65536x65536
log "B: start, $(left)s left"
timeout -k 10 $(( $(left) - 25 )) python -m fusebench run $CASES --shapes $SHAPES --impl triton,memcpy \
  --metrics none --gpus all --db $OUT/standing.db > $OUT/standing-run.txt 2>&1
log "B: fusebench run exit $?"
kill $SMI
python - $OUT/standing.db <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
print(con.execute("select impl, status, count(*) from cells group by impl, status").fetchall())
PY
python bench/standing.py $OUT/standing.db --all > $OUT/standing.txt 2>&1
log "done"
