#!/usr/bin/env bash
# The whole pipeline on the GPU machine: corpus -> tokenizer -> token streams -> training of
# target and draft -> evaluation and goldens. Run from the repository root:
#   OUT=/tmp/out bash tools/train/run_all.sh            # full run, about 9 minutes on one H200
#   OUT=/tmp/out MODE=smoke bash tools/train/run_all.sh # pipeline check with short training
# Environment: TOTAL (seconds for the whole script, default 540), SEED (1234),
# TOKENIZER=reuse to take models/pycoder's tokenizer files instead of training them again,
# COMPILE (1), EVAL_RESERVE (seconds kept for evaluation and packing, default 75).
# Results land in $OUT: log.txt and results.tar.gz (split in 15 MiB parts when larger), holding
# models/pycoder, models/pycoder-draft, tests/data/*.json and the stats/*.json files.
set -euo pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
T0=$(date +%s)
MODE=${MODE:-full}
TOTAL=${TOTAL:-540}
SEED=${SEED:-1234}
OUT=${OUT:-/tmp/out}
W=${WORK:-/tmp/pycoder-work}
R=$W/result
EVAL_RESERVE=${EVAL_RESERVE:-75}
mkdir -p "$OUT" "$W" "$R/models" "$R/tests/data" "$R/stats"
py=python3
stamp() { echo "$(( $(date +%s) - T0 ))"; }
declare -A T
pack() {
    (cd "$R" && tar czf "$W/results.tar.gz" .)
    rm -f "$OUT"/results.tar.gz*
    split -b 15M -d "$W/results.tar.gz" "$OUT/results.tar.gz."
    ls -l "$OUT"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
$py -c 'import torch, transformers, tokenizers; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)'

s=$(stamp); $py tools/train/build_corpus.py --out "$W/data" --seed "$SEED"; T[corpus]=$(( $(stamp) - s ))

s=$(stamp)
if [ "${TOKENIZER:-train}" = reuse ] && [ -f models/pycoder/tokenizer.json ]; then
    mkdir -p "$W/tok" && cp models/pycoder/tokenizer.json models/pycoder/tokenizer_config.json "$W/tok/"
    echo "tokenizer: reused models/pycoder"
else
    $py tools/train/train_tokenizer.py --data "$W/data" --out "$W/tok"
fi
T[tokenizer]=$(( $(stamp) - s ))
$py tools/train/check_template.py --tokenizer "$W/tok" || echo "WARNING: chat template / tokenizer check failed"

s=$(stamp); $py tools/train/encode.py --data "$W/data" --tokenizer "$W/tok" --seed "$SEED"; T[encode]=$(( $(stamp) - s ))
cp "$W/data/corpus_stats.json" "$W/data/token_stats.json" "$R/stats/"
cp "$W/tok/tokenizer.json" "$W/tok/tokenizer_config.json" "$R/stats/"

train() { # $1 budget, $2 compile, $3 log name
    $py tools/train/train.py --data "$W/data" --tokenizer "$W/tok" --seed "$SEED" \
        --out-target "$R/models/pycoder" --out-draft "$R/models/pycoder-draft" \
        --time-budget "$1" --compile "$2" --log "$R/stats/$3.jsonl" ${TRAIN_ARGS:-}
    cp "$W/data/train_info.json" "$R/stats/$3_info.json"
}
s=$(stamp)
if [ "$MODE" = smoke ]; then
    train 25 0 train_eager
    train 70 1 train_compiled
    EVAL_ARGS="--eval-windows 16"
else
    budget=$(( TOTAL - $(stamp) - EVAL_RESERVE ))
    echo "training budget: ${budget}s"
    train "$budget" "${COMPILE:-1}" train
    EVAL_ARGS=""
fi
T[train]=$(( $(stamp) - s ))
pack

s=$(stamp)
$py tools/train/eval.py --data "$W/data" --target "$R/models/pycoder" --draft "$R/models/pycoder-draft" \
    --out "$W/eval" $EVAL_ARGS
cp "$W/eval/pycoder_greedy.json" "$W/eval/pycoder_draft_greedy.json" "$R/tests/data/"
cp "$W/eval/eval.json" "$R/stats/"
T[eval]=$(( $(stamp) - s ))
{
    echo "{"
    for k in "${!T[@]}"; do echo "  \"$k\": ${T[$k]},"; done
    echo "  \"total\": $(stamp)"
    echo "}"
} > "$R/stats/timings.json"
cat "$R/stats/timings.json"
du -sh "$R/models"/*
pack
