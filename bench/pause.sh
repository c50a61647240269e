#!/bin/sh
# bench/pause.sh: a running stream's longest pause while a ~2,000-token prompt is prefilled next
# to it, for several --prefill-chunk values (tests/js/pause.mjs), on `dspark serve` with 2
# threads in baseline mode (one token per event).
#
#   sh bench/pause.sh [--chunks 2048,512,256,64] [--trials N] [-- SERVE FLAGS]
set -eu
cd "$(dirname "$0")/.."
. bench/serve_url.sh
CHUNKS=2048,512,256,64 TRIALS=5
while [ $# -gt 0 ]; do
    case $1 in
    --chunks) CHUNKS=$2; shift 2 ;;
    --trials) TRIALS=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: sh bench/pause.sh [--chunks LIST] [--trials N] [-- SERVE FLAGS]" >&2; exit 2 ;;
    esac
done
serve_needs
out=$(mktemp)
pid=""
trap '[ -z "$pid" ] || kill $pid 2>/dev/null; rm -f "$out"' EXIT
for c in $(echo "$CHUNKS" | tr , ' '); do
    build/dspark serve --port 0 --threads 2 --mode baseline --max-batch 4 --no-prefix-cache \
        --prefill-chunk "$c" "$@" >"$out" 2>&1 &
    pid=$!
    serve_url "$out" $pid
    printf 'prefill chunk %s: ' "$c"
    node tests/js/pause.mjs --url "$url" --trials "$TRIALS"
    kill $pid
    wait $pid || true
    pid=""
done
