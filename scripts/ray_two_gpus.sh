#!/usr/bin/env bash
# On a host with two GPUs: the same grid once on Ray (`--ray`, a local Ray instance with both GPUs,
# one actor per GPU) and once on the local scheduler (`--gpus all`), into separate stores under
# $OUT; prints each wall time and checks every cell is stored once, each Ray cell with its GPU.
# Needs Ray importable from /tmp/site (pip install --no-deps --target /tmp/site ray-*.whl and
# jsonschema's wheels).  CASES, SHAPES and IMPLS change the grid (the default, 200 cells, is sized
# for a few minutes per mode); DEVICE=cpu GPUS=0,1 tries the script without GPUs (its GPU check fails).
set -euo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/site:$PWD"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SEL=(${CASES:-softmax} --shapes "${SHAPES:-grid}" --impl "${IMPLS:-eager,triton}" --metrics none --device "${DEVICE:-cuda}")
python3 -c 'import ray, torch; print("ray", ray.__version__, "| GPUs:", torch.cuda.device_count())'
for mode in ray gpus; do
  db=$OUT/$mode.db; rm -f "$db" "$db"-*
  if [ "$mode" = ray ]; then flag=(--ray); else flag=(--gpus "${GPUS:-all}"); fi
  t0=$(date +%s.%N)
  python3 -m fusebench run "${SEL[@]}" "${flag[@]}" --db "$db" >"$OUT/$mode.txt" 2>&1 || { tail -20 "$OUT/$mode.txt"; exit 1; }
  echo "$mode: $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s wall"
done
python3 - "$OUT" <<'EOF'
import sqlite3, sys
out = sys.argv[1]
keys = lambda con: con.execute("SELECT case_name, impl, shape, requested_dtype FROM cells").fetchall()
ray, local = sqlite3.connect(f"{out}/ray.db"), sqlite3.connect(f"{out}/gpus.db")
r, l = keys(ray), keys(local)
assert len(r) == len(set(r)) and set(r) == set(l), f"ray {len(r)} cells ({len(set(r))} distinct), local {len(l)}"
per_gpu = ray.execute("SELECT hostname, device_name, driver, gpu_id, COUNT(*), SUM(status='ok') FROM cells "
                      "GROUP BY hostname, device_name, driver, gpu_id").fetchall()
for host, dev, drv, gpu, n, ok in per_gpu:
    print(f"  {host} | {dev} | driver {drv} | GPU {gpu}: {n} cells, {ok} ok")
assert all(h and d and g is not None for h, d, _, g, *_ in per_gpu), "a cell without its host, device or GPU"
assert len({g for *_, g, _, _ in per_gpu}) == 2, "expected cells on two GPUs"
for name, con in (("ray", ray), ("gpus", local)):
    print(name, dict(con.execute("SELECT status, COUNT(*) FROM cells GROUP BY status").fetchall()))
print(f"OK: {len(r)} cells, each stored once in each store; Ray cells on {len(per_gpu)} GPUs")
EOF
