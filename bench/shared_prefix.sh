#!/bin/sh
# bench/shared_prefix.sh: the server's resident memory while concurrent requests run over one
# long cached prefix (tests/js/shared_prefix.mjs), on `dspark serve` with 2 threads.
#
#   sh bench/shared_prefix.sh [--model DIR] [--prefix N] [--clients N] [--bin PATH]
#                             [-- SERVE FLAGS]
#
# --bin runs another build's dspark (for a before/after comparison). Writes
# build/bench/shared_prefix.json. Needs Node.js and tests/js/node_modules.
set -eu
cd "$(dirname "$0")/.."
. bench/serve_url.sh
MODEL=models/pycoder PREFIX=2000 CLIENTS=16 BIN=build/dspark
while [ $# -gt 0 ]; do
    case $1 in
    --model) MODEL=$2; shift 2 ;;
    --prefix) PREFIX=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: sh bench/shared_prefix.sh [--model DIR] [--prefix N] [--clients N] [--bin PATH] [-- SERVE FLAGS]" >&2; exit 2 ;;
    esac
done
serve_needs "$BIN"
out=$(mktemp)
"$BIN" serve --model "$MODEL" --port 0 --threads 2 --max-batch "$CLIENTS" "$@" >"$out" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$out"' EXIT
serve_url "$out" $pid
node tests/js/shared_prefix.mjs --url "$url" --pid $pid --prefix "$PREFIX" --clients "$CLIENTS" \
    --json build/bench/shared_prefix.json
