#!/bin/sh
# bench/loadtest.sh: 64 concurrent streaming clients against `dspark serve` over loopback for a
# bounded time (default 300 s), counting errors and sampling the server's RSS every 5 s
# (tests/js/loadtest.mjs). Exits non-zero on any error, when RSS grew after the warm-up, or
# when the server does not shut down cleanly.
#
#   sh bench/loadtest.sh [--duration S] [--clients N] [--model DIR] [--threads N]
#                        [--max-batch N] [-- SERVE FLAGS]
#
# Writes build/bench/loadtest.json. Needs Node.js and tests/js/node_modules
# (npm ci --prefix tests/js).
set -eu
cd "$(dirname "$0")/.."
. bench/serve_url.sh
DURATION=300 CLIENTS=64 MODEL=models/pycoder THREADS=2 BATCH=16
while [ $# -gt 0 ]; do
    case $1 in
    --duration) DURATION=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --max-batch) BATCH=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: sh bench/loadtest.sh [--duration S] [--clients N] [--model DIR] [--threads N] [--max-batch N] [-- SERVE FLAGS]" >&2; exit 2 ;;
    esac
done
serve_needs
log=build/bench/loadtest-server.log
# the queue holds every client, so a full batch never turns one away
build/dspark serve --model "$MODEL" --port 0 --threads "$THREADS" --max-batch "$BATCH" \
    --max-queue $((CLIENTS * 2)) "$@" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null' EXIT
serve_url "$log" $pid
rc=0
node tests/js/loadtest.mjs --url "$url" --pid $pid --clients "$CLIENTS" --duration "$DURATION" \
    --json build/bench/loadtest.json || rc=1
curl -s "$url/metrics" | grep -E '^dspark_(requests_total|batch_size_(sum|count)|queue_seconds|prefix_cache_(hits|reused|trimmed|bytes)|kv_pool_waits)' || true
kill -TERM $pid
wait $pid || { echo "FAIL the server did not exit cleanly (see $log)"; rc=1; }
trap - EXIT
exit $rc
