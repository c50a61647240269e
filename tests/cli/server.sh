#!/bin/sh
# Black-box tests of `dspark serve`: starts the real binary on models/pycoder (one open, one
# with an API key, and one each in draft, dspark and dflash modes) on free ports, drives them
# with the openai SDK (tests/js/server.test.mjs),
# and checks /metrics with promtool when it is installed.
set -u
D=${DSPARK:-build/dspark}
M=models/pycoder
[ -d "$M" ] || { echo "skipped: $M is absent"; exit 0; }
[ -d tests/js/node_modules/openai ] || {
    echo "skipped: the openai SDK is absent (npm ci --prefix tests/js)"
    exit 0
}
. tests/cli/lib/serve.sh
tmp=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    for p in $pids; do wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
start() { # start NAME FLAGS...: sets URL
    name=$1
    shift
    "$D" serve --model $M --port 0 --threads 2 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    pids="$pids $!"
    wait_url "$tmp/$name.out" $! && return 0
    echo "FAIL server $name did not start:"
    cat "$tmp/$name.err"
    exit 1
}
start open --max-batch 8
OPEN=$URL
start keyed --api-key sekret --mode baseline --no-prefix-cache
KEYED=$URL
MODES=""
for mode in draft dspark dflash; do # the same exactness under concurrency in every mode
    start $mode --mode $mode --max-batch 16
    MODES="$MODES${MODES:+,}$URL"
done
# and with draft lengths that adapt to the load (they must not change a sampled request's draws)
start auto --mode lookup --max-draft auto --max-batch 16 --calibration-file "$tmp/calib.json"
MODES="$MODES,$URL"
start load_aware --mode dspark --load-aware --max-batch 16 --calibration-file "$tmp/calib.json"
MODES="$MODES,$URL"
start pool --max-batch 8 --kv-pool-mb 1 # room for about one request's K/V at a time
POOL=$URL
# room for four requests' own K/V over a shared 1,250-token prefix, not for two cold ones
start pool_shared --mode baseline --max-batch 8 --kv-pool-mb 6
POOL_SHARED=$URL
# a prefix cache of 10 MiB (about 1,700 positions of models/pycoder): two 1,250-token prompts
# do not fit, and the older keeps its prefix
start trim --mode baseline --kv-cache-mb 10
TRIM=$URL
fail=0
DSPARK_URL=$OPEN DSPARK_URL_KEY=$KEYED DSPARK_URL_MODES=$MODES DSPARK_URL_POOL=$POOL \
    DSPARK_URL_POOL_SHARED=$POOL_SHARED DSPARK_URL_TRIM=$TRIM node tests/js/server.test.mjs || fail=1
if command -v promtool >/dev/null; then
    curl -s "$OPEN/metrics" | promtool check metrics && echo "ok   promtool check metrics" ||
        { echo "FAIL promtool check metrics"; fail=1; }
else
    echo "skipped: promtool (Debian package prometheus) is not installed"
fi
kill -TERM $pids
for p in $pids; do wait "$p" || { echo "FAIL server exit status"; fail=1; }; done
pids=""
exit $fail
