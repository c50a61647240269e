#!/bin/sh
# Black-box tests of --max-draft auto: the output stays baseline's whatever the caps, the first
# run calibrates into --calibration-file and the next one reuses it, a changed model folder
# recalibrates, and the JSON reports the caps used and the predicted rates.
set -u
D=${DSPARK:-build/dspark}
M=models/pycoder
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
[ -d "$M" ] || { echo "skipped: $M is absent"; exit 0; }
CAL="$tmp/cal.json"
P="def parse_args(argv):"
gen() { # mode, then extra flags
    mode=$1
    shift
    "$D" generate --model $M --prompt "$P" --max-tokens 48 --temperature 0 --ignore-eos \
        --mode $mode --json --no-progress --threads 1 "$@"
}
ids() { sed 's/.*"ids":\(\[[^]]*\]\).*/\1/' "$1"; }

gen baseline >"$tmp/base.json" 2>/dev/null || bad "baseline"
for mode in lookup draft dspark; do
    gen $mode --max-draft auto --calibration-file "$CAL" >"$tmp/$mode.json" 2>"$tmp/$mode.err" ||
        bad "$mode auto exit status"
    [ "$(ids "$tmp/$mode.json")" = "$(ids "$tmp/base.json")" ] && ok "$mode auto: baseline's ids" ||
        bad "$mode auto changed the output"
    grep -q "calibrated $mode" "$tmp/$mode.err" && ok "$mode: first run calibrates" ||
        bad "$mode: no calibration"
done
grep -q '"auto_draft":{"cap_rounds":{' "$tmp/draft.json" &&
    grep -q '"predicted_tok_s":{"0":' "$tmp/draft.json" && ok "json reports caps and rates" ||
    bad "json auto_draft"
[ -s "$CAL" ] && grep -q '"verify_ms"' "$CAL" && [ "$(grep -c '"draft_ms"' "$CAL")" -eq 3 ] &&
    ok "one cache entry per mode" || bad "cache file"

# the second run takes the cache; sampling works with it too
gen draft --max-draft auto --calibration-file "$CAL" >"$tmp/d2.json" 2>"$tmp/d2.err"
! grep -q calibrated "$tmp/d2.err" && [ "$(ids "$tmp/d2.json")" = "$(ids "$tmp/base.json")" ] &&
    ok "second run reuses the calibration" || bad "second run recalibrated"
"$D" generate --model $M --prompt "$P" --max-tokens 48 --temperature 0.8 --seed 3 --json \
    --no-progress --threads 1 --mode lookup --max-draft auto --calibration-file "$CAL" \
    >"$tmp/s2.json" 2>/dev/null
[ -s "$tmp/s2.json" ] && grep -q '"auto_draft"' "$tmp/s2.json" && ok "sampling with auto" ||
    bad "sampling with auto"

# a changed model folder (its weights touched) recalibrates; --recalibrate forces it
mkdir "$tmp/m"
cp $M/* "$tmp/m/"
touch -d '2001-01-01' "$tmp/m/model.safetensors"
"$D" generate --model "$tmp/m" --prompt "$P" --max-tokens 8 --mode lookup --max-draft auto \
    --calibration-file "$CAL" --no-progress --threads 1 >/dev/null 2>"$tmp/m1.err"
touch "$tmp/m/model.safetensors"
"$D" generate --model "$tmp/m" --prompt "$P" --max-tokens 8 --mode lookup --max-draft auto \
    --calibration-file "$CAL" --no-progress --threads 1 >/dev/null 2>"$tmp/m2.err"
grep -q calibrated "$tmp/m1.err" && grep -q calibrated "$tmp/m2.err" &&
    ok "touched weights recalibrate" || bad "touched weights"
gen lookup --max-draft auto --calibration-file "$CAL" --recalibrate >/dev/null 2>"$tmp/r.err"
grep -q calibrated "$tmp/r.err" && ok "--recalibrate" || bad "--recalibrate"

# a damaged cache file is reported, then replaced
printf '{"schema": 1, "entr' >"$CAL"
gen lookup --max-draft auto --calibration-file "$CAL" >/dev/null 2>"$tmp/dmg.err"
st=$?
[ $st -eq 0 ] && grep -q "ignoring the calibration cache" "$tmp/dmg.err" &&
    grep -q '"schema"' "$CAL" && ok "damaged cache replaced" || bad "damaged cache"

# serve: two requests batched, each with baseline's text; x_dspark and /metrics report the caps
"$D" generate --model $M --prompt "$P" --max-tokens 40 --temperature 0 --json --no-progress \
    --threads 1 >"$tmp/g.json" 2>/dev/null
want=$(sed 's/.*"text":"\(\([^"\\]\|\\.\)*\)".*/\1/' "$tmp/g.json")
"$D" serve --model $M --mode draft --max-draft auto --max-batch 2 --port 0 --threads 1 \
    --calibration-file "$CAL" >"$tmp/srv.out" 2>"$tmp/srv.err" &
spid=$!
. tests/cli/lib/serve.sh
wait_url "$tmp/srv.out" $spid
if [ -z "$URL" ] || ! command -v curl >/dev/null; then
    bad "serve --max-draft auto did not start (or no curl): $(cat "$tmp/srv.err")"
else
    body='{"prompt": "def parse_args(argv):", "max_tokens": 40, "temperature": 0}'
    for i in 1 2; do
        curl -s "$URL/v1/completions" -H 'Content-Type: application/json' -d "$body" \
            >"$tmp/c$i.json" &
    done
    wait %2 %3 2>/dev/null
    for i in 1 2; do
        got=$(sed 's/.*"text":"\(\([^"\\]\|\\.\)*\)".*/\1/' "$tmp/c$i.json")
        [ -n "$got" ] && [ "$got" = "$want" ] && grep -q '"auto_draft":{"cap":' "$tmp/c$i.json" &&
            ok "serve auto, request $i: baseline's text and x_dspark.auto_draft" ||
            bad "serve auto, request $i"
    done
    curl -s "$URL/metrics" >"$tmp/metrics"
    grep -q '^dspark_auto_draft_rounds_total{cap="1"} ' "$tmp/metrics" &&
        grep -q '^dspark_auto_draft_predicted_tokens_per_second{cap="0"} ' "$tmp/metrics" &&
        ok "/metrics reports the caps" || bad "/metrics auto_draft"
    if command -v promtool >/dev/null; then
        promtool check metrics <"$tmp/metrics" && ok "promtool" || bad "promtool"
    fi
fi
kill $spid 2>/dev/null
wait $spid 2>/dev/null

# bad values
"$D" generate --prompt x --max-draft autox >/dev/null 2>"$tmp/e1"
[ $? -eq 2 ] && grep -q "max-draft" "$tmp/e1" && ok "bad --max-draft" || bad "bad --max-draft"
exit $fail
