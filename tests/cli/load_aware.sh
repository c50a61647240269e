#!/bin/sh
# Black-box test of `dspark serve --load-aware`: refused, with the fix, outside dspark mode;
# in dspark mode, greedy requests sent together return the text each got when sent alone,
# x_dspark reports the drafts left out, and /metrics counts them.
set -u
D=${DSPARK:-build/dspark}
M=models/pycoder
[ -d "$M-dspark" ] || { echo "skipped: $M-dspark is absent"; exit 0; }
command -v curl >/dev/null || { echo "skipped: curl is absent"; exit 0; }
tmp=$(mktemp -d)
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

if "$D" serve --model $M --mode lookup --load-aware --port 0 >"$tmp/l.out" 2>"$tmp/l.err"; then
    bad "--load-aware with --mode lookup should be refused"
else
    grep -q "needs --mode dspark" "$tmp/l.err" && ok "refused outside dspark mode, with the fix" ||
        bad "the refusal does not say what to do: $(cat "$tmp/l.err")"
fi

"$D" serve --model $M --mode dspark --load-aware --max-batch 4 --port 0 --threads 2 \
    --calibration-file "$tmp/calib.json" --no-prefix-cache >"$tmp/s.out" 2>"$tmp/s.err" &
pid=$!
. tests/cli/lib/serve.sh
wait_url "$tmp/s.out" $pid
url=$URL
[ -n "$url" ] || { bad "serve --load-aware did not start: $(cat "$tmp/s.err")"; exit 1; }
req() { # req I OUT
    curl -s "$url/v1/completions" -H 'content-type: application/json' \
        -d "{\"prompt\":\"def f$1(x):\",\"max_tokens\":40,\"temperature\":0}" >"$2"
}
text() { sed -n 's/.*"text":"\(\([^"\\]\|\\.\)*\)".*/\1/p' "$1"; }
for i in 1 2 3 4; do req $i "$tmp/a$i.json"; done # one at a time: the single-stream path
curls=""
for i in 1 2 3 4; do
    req $i "$tmp/b$i.json" &
    curls="$curls $!"
done
for j in $curls; do wait "$j"; done
for i in 1 2 3 4; do
    alone=$(text "$tmp/a$i.json")
    together=$(text "$tmp/b$i.json")
    cut=$(grep -o '"load_aware_cut":[0-9]*' "$tmp/b$i.json" | cut -d: -f2)
    [ -n "$alone" ] && [ -n "$cut" ] && [ "$alone" = "$together" ] &&
        ok "request $i: the text it got alone; load_aware_cut $cut" ||
        bad "request $i: alone [$alone] together [$together] cut [$cut]"
done
curl -s "$url/metrics" | grep -q '^dspark_load_aware_cut_total ' && ok "/metrics counts the drafts left out" ||
    bad "/metrics lacks dspark_load_aware_cut_total"
exit $fail
