#!/usr/bin/env bash
# DSpark and DFlash drafters for models/pycoder, in one device call from the repository root:
#   OUT=/tmp/out GOLDEN=.golden TOTAL=420 bash tools/train/run_drafters.sh
# build_corpus.py (same seed as the target's run) builds the corpus in the background while
# train_drafters.py checks its modules against the golden data (GOLDEN: a copy of the golden
# folder; empty skips the check); then it trains both drafters until TOTAL seconds after the start
# less the time kept for evaluation, and writes to $OUT: dspark_ckpt/dflash_ckpt.safetensors (BF16,
# rewritten every minute while training), summary.json, and results.tar.gz.NN (split at 15 MiB)
# holding models/pycoder-dspark, models/pycoder-dflash, tests/data/drafters and stats/.
# Extra options for train_drafters.py go in TRAIN_ARGS.
set -uo pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
T0=$(date +%s.%N)
OUT=${OUT:-/tmp/out}
W=${WORK:-/tmp/drafter-work}
SEED=${SEED:-1234}
mkdir -p "$OUT" "$W"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 tools/train/build_corpus.py --out "$W/data" --seed "$SEED" > "$W/corpus.log" 2>&1 &
CPID=$!
python3 tools/train/train_drafters.py --data "$W/data" --corpus-pid "$CPID" --work "$W" --out "$OUT" \
    --golden "${GOLDEN:-}" --seed "$SEED" --t0 "$T0" --total "${TOTAL:-420}" ${TRAIN_ARGS:-}
rc=$?
echo "--- corpus log (tail)"
tail -4 "$W/corpus.log" | cut -c1-400
exit $rc
