#!/bin/sh
# bench/concurrency.sh: aggregate tokens/s of `dspark serve` with 1, 4, 16 and 64 concurrent
# clients against the same requests run one at a time, per mode (tests/js/concurrency.mjs),
# and a check that every output equals its serialised run.
#
#   sh bench/concurrency.sh [--modes baseline,lookup] [--levels 1,4,16,64] [--requests 64]
#                           [--max-tokens 64] [--threads 2] [--model DIR] [-- SERVE FLAGS]
#
# Writes build/bench/concurrency-MODE.json. Needs Node.js and tests/js/node_modules.
set -eu
cd "$(dirname "$0")/.."
. bench/serve_url.sh
MODES=baseline,lookup LEVELS=1,4,16,64 REQUESTS=64 TOKENS=64 THREADS=2 MODEL=models/pycoder
while [ $# -gt 0 ]; do
    case $1 in
    --modes) MODES=$2; shift 2 ;;
    --levels) LEVELS=$2; shift 2 ;;
    --requests) REQUESTS=$2; shift 2 ;;
    --max-tokens) TOKENS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: sh bench/concurrency.sh [--modes LIST] [--levels LIST] [--requests N] [--max-tokens N] [--threads N] [--model DIR] [-- SERVE FLAGS]" >&2; exit 2 ;;
    esac
done
serve_needs
max=$(echo "$LEVELS" | tr , '\n' | sort -n | tail -1)
rc=0
pid=""
trap '[ -z "$pid" ] || kill $pid 2>/dev/null' EXIT
for mode in $(echo "$MODES" | tr , ' '); do
    log=build/bench/concurrency-$mode-server.log
    build/dspark serve --model "$MODEL" --mode "$mode" --port 0 --threads "$THREADS" \
        --max-batch "$max" --max-queue $((max * 2)) "$@" >"$log" 2>&1 &
    pid=$!
    serve_url "$log" $pid
    echo "== $mode (--max-batch $max, $THREADS threads, load $(cut -d' ' -f1-3 /proc/loadavg))"
    node tests/js/concurrency.mjs --url "$url" --levels "$LEVELS" --requests "$REQUESTS" \
        --max-tokens "$TOKENS" --json "build/bench/concurrency-$mode.json" || rc=1
    kill -TERM $pid
    wait $pid || true
    pid=""
done
exit $rc
