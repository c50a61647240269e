#!/bin/sh
# Black-box tests of `dspark generate` on the shipped model: text and JSON output, modes that
# must agree, stop strings, seeds, and clear failures on bad flags and broken model folders.
set -u
D=${DSPARK:-build/dspark}
M=models/pycoder
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
[ -d "$M" ] || { echo "skipped: $M is absent"; exit 0; }

# plain text: the prompt, then the continuation; speed on stderr
"$D" generate --prompt "def add(a, b):" --max-tokens 12 --temperature 0 --no-progress \
    >"$tmp/out" 2>"$tmp/err" && head -c 14 "$tmp/out" | grep -q "def add(a, b):" &&
    grep -q "decode: .* tok/s" "$tmp/err" && ok "text output and speed report" || bad "text output"

# every mode gives the same greedy ids
P="def parse_args(argv):"
for mode in baseline lookup draft; do
    "$D" generate --model $M --prompt "$P" --max-tokens 40 --temperature 0 --ignore-eos \
        --mode $mode --json --no-progress >"$tmp/$mode.json" 2>/dev/null ||
        bad "mode $mode exit status"
    sed 's/.*"ids":\(\[[^]]*\]\).*/\1/' "$tmp/$mode.json" >"$tmp/$mode.ids"
done
cmp -s "$tmp/baseline.ids" "$tmp/lookup.ids" && cmp -s "$tmp/baseline.ids" "$tmp/draft.ids" &&
    ok "baseline, lookup and draft ids are equal" || bad "modes disagree"
grep -q '"rounds":\[{"drafted"' "$tmp/draft.json" && ok "json has per-round drafts" ||
    bad "json rounds"

# a stop string ends the text before it
"$D" generate --model $M --prompt "def add(a, b):" --max-tokens 40 --temperature 0 \
    --stop "return" --json --no-progress >"$tmp/stop.json" 2>/dev/null
grep -q '"finish_reason":"stop"' "$tmp/stop.json" && ! grep -q '"text":"[^"]*return' \
    "$tmp/stop.json" && ok "stop string" || bad "stop string"

# the same seed gives the same sample
for i in 1 2; do
    "$D" generate --model $M --prompt "import os" --max-tokens 24 --temperature 1 --seed 7 \
        --no-progress >"$tmp/s$i" 2>/dev/null
done
cmp -s "$tmp/s1" "$tmp/s2" && ok "seeded sampling is reproducible" || bad "seed"

# failures: clear message, non-zero exit, no crash
"$D" generate --prompt x --bogus >/dev/null 2>"$tmp/e1"
[ $? -eq 2 ] && grep -q "unknown flag" "$tmp/e1" && ok "unknown flag" || bad "unknown flag"
"$D" generate --prompt x --temperature abc >/dev/null 2>"$tmp/e2"
[ $? -eq 2 ] && grep -q "temperature" "$tmp/e2" && ok "bad number" || bad "bad number"
for cmd in generate serve benchmark; do
    "$D" $cmd --gpu-inputs fp8 >/dev/null 2>"$tmp/e6"
    [ $? -eq 2 ] && grep -q "gpu-inputs takes exact or bf16" "$tmp/e6" &&
        ok "$cmd: bad --gpu-inputs" || bad "$cmd: bad --gpu-inputs"
    "$D" $cmd --gpu-kv f16 >/dev/null 2>"$tmp/e7"
    [ $? -eq 2 ] && grep -q "gpu-kv takes f32 or bf16" "$tmp/e7" &&
        ok "$cmd: bad --gpu-kv" || bad "$cmd: bad --gpu-kv"
done
# bf16 GPU inputs ask nothing of the CPU: it says so, and its output does not change
"$D" generate --model $M --prompt "def add(a, b):" --max-tokens 12 --temperature 0 \
    --gpu-inputs bf16 --json --no-progress >"$tmp/bf.json" 2>"$tmp/bf.err"
sed 's/.*"ids":\(\[[^]]*\]\).*/\1/' "$tmp/bf.json" >"$tmp/bf.ids"
"$D" generate --model $M --prompt "def add(a, b):" --max-tokens 12 --temperature 0 \
    --json --no-progress 2>/dev/null | sed 's/.*"ids":\(\[[^]]*\]\).*/\1/' >"$tmp/f32.ids"
grep -q "apply to --gpu only" "$tmp/bf.err" && cmp -s "$tmp/bf.ids" "$tmp/f32.ids" &&
    ok "--gpu-inputs bf16 without --gpu" || bad "--gpu-inputs bf16 without --gpu"
"$D" generate --model $M --prompt "def add(a, b):" --max-tokens 12 --temperature 0 \
    --gpu-kv bf16 --json --no-progress >"$tmp/kv.json" 2>"$tmp/kv.err"
sed 's/.*"ids":\(\[[^]]*\]\).*/\1/' "$tmp/kv.json" >"$tmp/kv.ids"
grep -q "K/V caches apply to --gpu only" "$tmp/kv.err" && cmp -s "$tmp/kv.ids" "$tmp/f32.ids" &&
    ok "--gpu-kv bf16 without --gpu" || bad "--gpu-kv bf16 without --gpu"
"$D" generate --model "$tmp/nowhere" --prompt x >/dev/null 2>"$tmp/e3"
st=$?
[ $st -ne 0 ] && [ $st -lt 128 ] && grep -q "error:" "$tmp/e3" && ok "missing folder" ||
    bad "missing folder"
mkdir -p "$tmp/broken"
cp $M/tokenizer.json $M/tokenizer_config.json "$tmp/broken/"
printf '{"architectures": ["Qwen3ForCausalLM"], "hidden_size": -3}' >"$tmp/broken/config.json"
"$D" generate --model "$tmp/broken" --prompt x >/dev/null 2>"$tmp/e4"
st=$?
[ $st -ne 0 ] && [ $st -lt 128 ] && grep -q "config.json" "$tmp/e4" && ok "broken config.json" ||
    bad "broken config.json"
cp $M/config.json "$tmp/broken/"
head -c 100000 $M/model.safetensors >"$tmp/broken/model.safetensors"
"$D" generate --model "$tmp/broken" --prompt x >/dev/null 2>"$tmp/e5"
st=$?
[ $st -ne 0 ] && [ $st -lt 128 ] && grep -q "model.safetensors" "$tmp/e5" &&
    ok "truncated safetensors" || bad "truncated safetensors"
exit $fail
