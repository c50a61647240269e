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

# bad values
"$D" generate --prompt x --max-draft autox >/dev/null 2>"$tmp/e1"
[ $? -eq 2 ] && grep -q "max-draft" "$tmp/e1" && ok "bad --max-draft" || bad "bad --max-draft"
exit $fail
