#!/usr/bin/env bash
# One device call: `scripts/device_run.sh STEP [STEP...]`, each step a fusebench command writing to
# one store under $OUT (carried between calls by copying it back in with CARRY_DB).
#   quick  - ceilings, then `fusebench run` (every case, quick shapes, every implementation)
#   resume - finish the latest run of the store
#   grid   - the full grids of the given cases (GRID_CASES, GRID_IMPLS), cut at GRID_SECONDS
# The device gets the working tree without .git: pass FUSEBENCH_COMMIT=$(git rev-parse --short HEAD)
# in the command so that the runs record their commit.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
DB=$OUT/fb.db
[ -n "${CARRY_DB:-}" ] && [ -f "$CARRY_DB" ] && cp "$CARRY_DB" "$DB"
fb() { python3 -m fusebench.cli "$@"; }
for step in "$@"; do
  case $step in
    quick)  fb ceilings --db "$DB" 2>&1 | tee "$OUT/ceilings.txt"
            timeout -s TERM "${QUICK_SECONDS:-480}" python3 -m fusebench.cli run --metrics "${QUICK_METRICS:-default}" --db "$DB" 2>&1 | tee "$OUT/quick.txt" ;;
    resume) last=$(python3 -c "import sqlite3; print(sqlite3.connect('$DB').execute('select max(id) from runs').fetchone()[0])")
            timeout -s TERM "${QUICK_SECONDS:-480}" python3 -m fusebench.cli run --resume "$last" --db "$DB" 2>&1 | tee "$OUT/resume.txt" ;;
    grid)   timeout -s TERM "${GRID_SECONDS:-480}" python3 -m fusebench.cli run ${GRID_CASES:-softmax layernorm} --shapes grid \
              --impl "${GRID_IMPLS:-eager,inductor,triton}" --metrics "${GRID_METRICS:-none}" --db "$DB" 2>&1 | tee "$OUT/grid.txt" ;;
  esac
done
python3 -c "import sqlite3; sqlite3.connect('$DB').execute('PRAGMA wal_checkpoint(TRUNCATE)')"
ls -la "$OUT"
