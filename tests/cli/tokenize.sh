#!/bin/sh
# tests/cli/tokenize.sh: black-box tests of `dspark tokenize` on the committed tiny tokenizer.
# Run from the repository root with DSPARK pointing at the binary. The expected ids are those
# the Hugging Face tokenizers library gives for the same tokenizer.json.
set -u
DSPARK=${DSPARK:-build/dspark}
MODEL=tests/data/tokenizer/tiny_bpe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

check() { # name, expected, actual
    if [ "$2" = "$3" ]; then
        echo "ok   $1"
    else
        echo "FAIL $1: expected '$2', got '$3'"
        fails=$((fails + 1))
    fi
}

out=$("$DSPARK" tokenize --model "$MODEL" --text 'Hello world<|endoftext|>')
check "text" '[287,274,291]' "$out"

out=$("$DSPARK" tokenize --model "$MODEL" --text '')
check "empty text" '[]' "$out"

printf '%s\n' '"Hello world"' '"<|user|>the cat\n"' '' '"\u4e2d"' > "$tmp/in.jsonl"
out=$("$DSPARK" tokenize --model "$MODEL" --jsonl "$tmp/in.jsonl" | tr '\n' ' ')
check "jsonl" '[287,274] [292,116,257,269,265,10] [289] ' "$out"

out=$(printf '"Hello"\n' | "$DSPARK" tokenize --model "$MODEL" --jsonl -)
check "jsonl stdin" '[287]' "$out"

"$DSPARK" tokenize --help | grep -q -- '--jsonl'
check "help" 0 $?

printf '"ok"\nnot json\n' > "$tmp/bad.jsonl"
"$DSPARK" tokenize --model "$MODEL" --jsonl "$tmp/bad.jsonl" > "$tmp/out" 2> "$tmp/err"
check "bad jsonl exit" 1 $?
grep -q 'bad.jsonl:2' "$tmp/err"
check "bad jsonl message" 0 $?

"$DSPARK" tokenize --model "$tmp/nowhere" --text hi > /dev/null 2> "$tmp/err"
check "missing model exit" 1 $?
grep -q 'tokenizer.json' "$tmp/err"
check "missing model message" 0 $?

"$DSPARK" tokenize --text hi > /dev/null 2>&1
check "missing --model" 2 $?

"$DSPARK" tokenize --model "$MODEL" --text a --jsonl x > /dev/null 2>&1
check "both inputs" 2 $?

printf '{"model":{"vocab":{"a":0},"merges":[]}' > "$tmp/tokenizer.json"
"$DSPARK" tokenize --model "$tmp" --text a > /dev/null 2> "$tmp/err"
check "truncated tokenizer.json exit" 1 $?
grep -q 'tokenizer.json: not valid JSON' "$tmp/err"
check "truncated tokenizer.json message" 0 $?

[ "$fails" -eq 0 ]
