#!/bin/sh
# Black-box tests of `dspark doctor`: it runs, exits 0 and reports every section (text and
# JSON); the calibration cache's state and the models found change its verdict; bad flags fail.
set -u
D=${DSPARK:-build/dspark}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
export XDG_CACHE_HOME="$tmp/cache"
unset DSPARK_MODELS

# the full report, bandwidth estimate included (about a second)
"$D" doctor >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && ok "doctor exits 0" || { bad "doctor exit status"; cat "$tmp/err"; }
missing=""
for field in "^cpu  .*threads online" "^features .*avx2" "^build  .* CPU kernels" \
    "^memory  .*GiB total.*transparent hugepages" "^bandwidth  .*GB/s on 1 thread" "^gpu  " \
    "^libraries  *cJSON [0-9].*PCRE2 [0-9].*utf8proc [0-9].*libmicrohttpd [0-9]" \
    "^calibration  *$tmp/cache/dspark/calibration.json: none yet" "^models  " "^verdict: "; do
    grep -q "$field" "$tmp/out" || missing="$missing [$field]"
done
[ -z "$missing" ] && ok "doctor reports every section" ||
    { bad "doctor fields missing:$missing"; cat "$tmp/out"; }
# the CPU features it prints are the ones /proc/cpuinfo lists
if grep -qw avx2 /proc/cpuinfo; then
    grep -q "^features  *avx2" "$tmp/out" && ok "avx2 as in /proc/cpuinfo" || bad "avx2 flag"
else
    grep -q "^features  *-avx2" "$tmp/out" && ok "no avx2 as in /proc/cpuinfo" || bad "avx2 flag"
fi

# AMX: used when the CPU has it; DSPARK_NO_AMX=1 turns it off, and doctor says so
if grep -qw amx_bf16 /proc/cpuinfo && grep -q "AMX-BF16 matmul" "$tmp/out"; then
    DSPARK_NO_AMX=1 "$D" doctor --no-bandwidth >"$tmp/noamx" 2>&1
    ! grep -q "AMX-BF16 matmul" "$tmp/noamx" &&
        grep -q "note: *the CPU has AMX-BF16 but the BF16 matmul does not use it" "$tmp/noamx" &&
        ok "AMX off: a note" || { bad "AMX off"; cat "$tmp/noamx"; }
fi

# JSON, without the bandwidth run
"$D" doctor --json --no-bandwidth >"$tmp/j" 2>"$tmp/err"
[ $? -eq 0 ] || bad "doctor --json exit status"
missing=""
for key in '"cpu":{"model":' '"features":{"avx2":' '"build":{"kernels":' \
    '"memory":{"total_bytes":' '"gpu":{"available":' '"libraries":{"cjson":' \
    '"calibration":{"path":' '"state":"absent"' '"models":{"found":' '"verdict":{"ready":'; do
    grep -q "$key" "$tmp/j" || missing="$missing $key"
done
[ -z "$missing" ] && ! grep -q '"read_gb_s_1_thread"' "$tmp/j" && ok "doctor --json" ||
    { bad "doctor --json:$missing"; cat "$tmp/j"; }

# a damaged calibration cache is a problem with its fix; a valid one is counted
mkdir -p "$tmp/cache/dspark"
printf '{"schema": 1, "entries": ' >"$tmp/cache/dspark/calibration.json"
"$D" doctor --no-bandwidth >"$tmp/out2" 2>&1
[ $? -eq 0 ] && grep -q "^verdict: [0-9]* problem" "$tmp/out2" &&
    grep -q "fix: rm $tmp/cache/dspark/calibration.json" "$tmp/out2" &&
    ok "damaged calibration cache: problem and fix" || { bad "damaged cache"; cat "$tmp/out2"; }
printf '{"schema": 1, "entries": {"a": {}, "b": {}}}' >"$tmp/cache/dspark/calibration.json"
"$D" doctor --no-bandwidth --json >"$tmp/j2" 2>&1
grep -q '"state":"valid","entries":2' "$tmp/j2" && ok "valid calibration cache" ||
    bad "valid calibration cache"

# models: none found is a problem; one that cannot load is a note
mkdir -p "$tmp/empty" "$tmp/zoo/q4"
Dabs=$(cd "$(dirname "$D")" && pwd)/$(basename "$D")
(cd "$tmp/empty" && "$Dabs" doctor --no-bandwidth >"$tmp/out3" 2>&1)
grep -q "problem: no model folders found" "$tmp/out3" && ok "no models: a problem" ||
    { bad "no models"; cat "$tmp/out3"; }
if [ -d models/pycoder ]; then
    cp models/pycoder/config.json "$tmp/zoo/q4/"
    "$D" doctor --no-bandwidth --models-dir "$tmp/zoo" >"$tmp/out4" 2>&1
    grep -q "note: *$tmp/zoo/q4 cannot be loaded: no \*.safetensors weights" "$tmp/out4" &&
        ok "unloadable model: a note" || { bad "unloadable model"; cat "$tmp/out4"; }
fi
"$D" doctor --models-dir "$tmp/nowhere" >/dev/null 2>"$tmp/e1"
[ $? -eq 2 ] && grep -q "not a folder" "$tmp/e1" && ok "missing --models-dir" ||
    bad "missing --models-dir"
"$D" doctor --bogus >/dev/null 2>"$tmp/e2"
[ $? -eq 2 ] && grep -q "unknown flag" "$tmp/e2" && ok "unknown flag" || bad "unknown flag"
exit $fail
