#!/bin/sh
# Black-box tests of `dspark models` and `--mode auto`: the shipped family is listed with its
# drafters, generate/serve/benchmark resolve auto to the DSpark drafter and report it, greedy
# output equals baseline's, a given drafter wins, and bad folders fail with a clear message.
set -u
D=${DSPARK:-build/dspark}
M=models/pycoder
fail=0
tmp=$(mktemp -d)
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
[ -d "$M" ] || { echo "skipped: $M is absent"; exit 0; }
# only the repository's models: no $DSPARK_MODELS, an empty cache folder
export XDG_CACHE_HOME="$tmp/cache"
unset DSPARK_MODELS

# the listing: each folder with its kind, and the target's drafters and auto choice
"$D" models >"$tmp/list" 2>&1 || bad "models exit status"
grep -q "^models/pycoder  *model  *Qwen3ForCausalLM .* bf16" "$tmp/list" &&
    grep -q "drafters: dspark models/pycoder-dspark, dflash models/pycoder-dflash, draft models/pycoder-draft" "$tmp/list" &&
    grep -q -- "--mode auto: dspark models/pycoder-dspark" "$tmp/list" &&
    grep -q "^models/pycoder-dflash  *dflash drafter" "$tmp/list" &&
    ok "models lists the pycoder family" || { bad "models listing"; cat "$tmp/list"; }
"$D" models --json >"$tmp/list.json" 2>&1
grep -q '"auto":{"mode":"dspark","drafter":"models/pycoder-dspark"}' "$tmp/list.json" &&
    grep -q '"params":12588672' "$tmp/list.json" && ok "models --json" || bad "models --json"

# a folder of published names next to a copy of the target, found through $DSPARK_MODELS
mkdir -p "$tmp/zoo/Qwen/Qwen3-4B" "$tmp/zoo/deepseek-ai/dspark_qwen3_8b_block7"
cp $M/config.json $M/tokenizer.json "$tmp/zoo/Qwen/Qwen3-4B/"
cp models/pycoder-dspark/config.json "$tmp/zoo/deepseek-ai/dspark_qwen3_8b_block7/"
DSPARK_MODELS="$tmp/zoo" "$D" models >"$tmp/zoo.list" 2>&1
grep -q "Qwen/Qwen3-4B .*cannot load\|cannot load: no \*.safetensors" "$tmp/zoo.list" &&
    grep -q "dspark_qwen3_8b_block7 .*dspark drafter" "$tmp/zoo.list" &&
    grep -q "drafter for: no target found" "$tmp/zoo.list" &&
    ok "8B drafter is not matched to a 4B target" || { bad "zoo listing"; cat "$tmp/zoo.list"; }
"$D" models --models-dir "$tmp/nowhere" >/dev/null 2>"$tmp/e1"
[ $? -eq 2 ] && grep -q "not a folder" "$tmp/e1" && ok "missing --models-dir" ||
    bad "missing --models-dir"

# generate --mode auto: the choice on stderr, the resolved mode in the JSON, baseline's ids
P="def parse_args(argv):"
"$D" generate --model $M --prompt "$P" --max-tokens 32 --temperature 0 --ignore-eos \
    --mode auto --json --no-progress >"$tmp/auto.json" 2>"$tmp/auto.err" || bad "auto exit status"
"$D" generate --model $M --prompt "$P" --max-tokens 32 --temperature 0 --ignore-eos \
    --json --no-progress >"$tmp/base.json" 2>/dev/null
grep -q "mode auto: dspark (drafter models/pycoder-dspark)" "$tmp/auto.err" &&
    grep -q '"mode":"dspark","drafter":"models/pycoder-dspark"' "$tmp/auto.json" &&
    ok "generate --mode auto picks DSpark" || { bad "generate --mode auto"; cat "$tmp/auto.err"; }
sed 's/.*"ids":\(\[[^]]*\]\).*/\1/' "$tmp/auto.json" >"$tmp/auto.ids"
sed 's/.*"ids":\(\[[^]]*\]\).*/\1/' "$tmp/base.json" >"$tmp/base.ids"
cmp -s "$tmp/auto.ids" "$tmp/base.ids" && ok "auto ids equal baseline ids" || bad "auto ids"
"$D" generate --model $M --prompt "$P" --max-tokens 8 --mode auto --drafter models/pycoder-draft \
    --json --no-progress >"$tmp/given.json" 2>"$tmp/given.err"
grep -q "mode auto: draft (given drafter models/pycoder-draft)" "$tmp/given.err" &&
    grep -q '"mode":"draft"' "$tmp/given.json" && ok "a given drafter wins" || bad "given drafter"
# the GPU runs the block drafters too: the same choice (whether or not this build has CUDA)
"$D" generate --model $M --prompt "$P" --max-tokens 8 --mode auto --gpu --no-progress \
    >/dev/null 2>"$tmp/gpu.err"
grep -q "mode auto: dspark (drafter models/pycoder-dspark)" "$tmp/gpu.err" &&
    ok "--gpu: auto picks DSpark too" || bad "--gpu auto"
# a copy of the target alone, run elsewhere (no ./models): nothing fits, n-gram lookup
mkdir -p "$tmp/alone/solo"
cp $M/* "$tmp/alone/solo/"
Dabs=$(cd "$(dirname "$D")" && pwd)/$(basename "$D")
(cd "$tmp/alone" && "$Dabs" generate --model solo --prompt "$P" --max-tokens 8 --mode auto \
    --json --no-progress >"$tmp/solo.json" 2>"$tmp/solo.err")
grep -q "mode auto: lookup" "$tmp/solo.err" && grep -q '"mode":"lookup"' "$tmp/solo.json" &&
    ok "no drafter: lookup" || bad "lookup fallback"
# a draft model with another tokenizer is refused
mkdir -p "$tmp/othertok"
cp models/pycoder-draft/* "$tmp/othertok/"
printf '{"model": {"type": "BPE", "vocab": {}, "merges": []}}' >"$tmp/othertok/tokenizer.json"
"$D" generate --model $M --prompt x --mode auto --drafter "$tmp/othertok" >/dev/null 2>"$tmp/e2"
[ $? -eq 2 ] && grep -q "does not share the tokenizer" "$tmp/e2" && ok "other tokenizer refused" ||
    bad "other tokenizer"
"$D" generate --model "$tmp/nowhere" --prompt x --mode auto >/dev/null 2>"$tmp/e3"
[ $? -eq 2 ] && grep -q "not a model folder" "$tmp/e3" && ok "auto on a missing folder" ||
    bad "auto on a missing folder"

# serve --mode auto reports the resolved mode
"$D" serve --model $M --port 0 --threads 2 --mode auto >"$tmp/serve.out" 2>"$tmp/serve.err" &
pid=$!
URL=""
for i in $(seq 1 100); do
    URL=$(sed -n "s/.* on \(http:[^ ]*\) .*/\1/p" "$tmp/serve.out" 2>/dev/null)
    [ -n "$URL" ] && break
    sleep 0.1
done
grep -q "(mode dspark)" "$tmp/serve.out" && grep -q "mode auto: dspark" "$tmp/serve.err" &&
    curl -s "$URL/health" | grep -q '"mode":"dspark"' && ok "serve --mode auto" ||
    { bad "serve --mode auto"; cat "$tmp/serve.out" "$tmp/serve.err"; }
kill "$pid" && wait "$pid" 2>/dev/null
pid=""

# benchmark --modes auto runs the chosen mode under its own name
"$D" benchmark --model $M --modes auto --prompts bench/prompts/copy.jsonl --limit 1 --trials 1 \
    --max-new-tokens 8 --threads 2 >"$tmp/bench.out" 2>"$tmp/bench.err" &&
    grep -q "auto-dspark" "$tmp/bench.out" && ok "benchmark --modes auto" ||
    { bad "benchmark --modes auto"; cat "$tmp/bench.out" "$tmp/bench.err"; }
exit $fail
