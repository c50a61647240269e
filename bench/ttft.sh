#!/bin/sh
# bench/ttft.sh: time to first token of a follow-up turn over a ~2,000-token cached prefix
# against a cold prompt of the same length, on `dspark serve` with 2 threads.
#
#   sh bench/ttft.sh [--model DIR] [--threads N] [--prefix N] [--trials N] [--from-disk]
#                    [--bin PATH] [-- SERVE FLAGS]
#
# --bin runs another build's dspark (for a before/after comparison).
# --from-disk keeps one entry in RAM and spills to a temporary folder: the follow-up turn then
# reads the first turn's KV from its file.
# Writes build/bench/ttft.json. Needs Node.js and tests/js/node_modules (npm ci --prefix tests/js).
set -eu
cd "$(dirname "$0")/.."
. bench/serve_url.sh
MODEL=models/pycoder THREADS=2 PREFIX=2000 TRIALS=7 DISK="" BIN=build/dspark
while [ $# -gt 0 ]; do
    case $1 in
    --model) MODEL=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --prefix) PREFIX=$2; shift 2 ;;
    --trials) TRIALS=$2; shift 2 ;;
    --from-disk) DISK=$(mktemp -d); shift ;;
    --bin) BIN=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: sh bench/ttft.sh [--model DIR] [--threads N] [--prefix N] [--trials N] [--from-disk] [--bin PATH] [-- SERVE FLAGS]" >&2; exit 2 ;;
    esac
done
serve_needs "$BIN"
out=$(mktemp)
json=build/bench/ttft.json
if [ -n "$DISK" ]; then
    set -- --prefix-cache-entries 1 --prefix-cache-dir "$DISK" "$@"
    json=build/bench/ttft-disk.json
fi
"$BIN" serve --model "$MODEL" --port 0 --threads "$THREADS" "$@" >"$out" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$out"; [ -z "$DISK" ] || rm -rf "$DISK"' EXIT
serve_url "$out" $pid
node tests/js/ttft.mjs --url "$url" --prefix "$PREFIX" --trials "$TRIALS" --json "$json" \
    ${DISK:+--from-disk}
