#!/bin/sh
# tests/cli/render.sh: black-box tests of `dspark render`: a template file with a context, a
# model folder's template (messages normalized as the server does), the tool-call format, a
# fixed clock, and clear failures for template errors, bad contexts and bad flags.
set -u
D=${DSPARK:-build/dspark}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

printf '%s' "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}" >"$tmp/t.jinja"
printf '%s' '{"messages": [{"role": "user", "content": " hi "}], "add_generation_prompt": true}' >"$tmp/c.json"
out=$("$D" render --template "$tmp/t.jinja" --context "$tmp/c.json")
[ "$out" = "<user>hi<assistant>" ] && ok "template file" || bad "template file: $out"

out=$(printf '%s' '{"messages": []}' | "$D" render --template "$tmp/t.jinja" --context -)
[ -z "$out" ] && ok "context from stdin" || bad "stdin: $out"

printf '%s' "{{ strftime_now('%Y-%m-%d') }}" >"$tmp/date.jinja"
out=$(TZ=UTC "$D" render --template "$tmp/date.jinja" --context "$tmp/c.json" --now 1721952000)
[ "$out" = "2024-07-26" ] && ok "--now fixes the clock" || bad "--now: $out"

if [ -d models/pycoder ]; then
    printf '%s' '{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "add_generation_prompt": true, "enable_thinking": false}' >"$tmp/m.json"
    "$D" render --model models/pycoder --context "$tmp/m.json" >"$tmp/out" &&
        printf '<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' | cmp -s - "$tmp/out" &&
        ok "model template with normalized content parts" || bad "model template"
    out=$("$D" render --model models/pycoder --tool-format)
    [ "$out" = "hermes" ] && ok "tool-call format of the model" || bad "tool format: $out"
fi

printf '%s' "{{ raise_exception('no system messages') }}" >"$tmp/raise.jinja"
"$D" render --template "$tmp/raise.jinja" --context "$tmp/c.json" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "no system messages" "$tmp/err" && ok "raise_exception fails with its message" || bad "raise_exception"

printf '%s' "{% if x %}{{ 1 + }}" >"$tmp/bad.jinja"
"$D" render --template "$tmp/bad.jinja" --context "$tmp/c.json" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "line 1, column" "$tmp/err" && ok "syntax error with its position" || bad "syntax error"

printf '[1, 2]' >"$tmp/list.json"
"$D" render --template "$tmp/t.jinja" --context "$tmp/list.json" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "JSON object" "$tmp/err" && ok "context must be an object" || bad "context type"

"$D" render --template "$tmp/t.jinja" >/dev/null 2>&1
[ $? -eq 2 ] && ok "missing --context is a usage error" || bad "usage"
"$D" render --template "$tmp/t.jinja" --context "$tmp/c.json" --bogus >/dev/null 2>&1
[ $? -eq 2 ] && ok "unknown flag" || bad "unknown flag"
"$D" render --help | grep -q -- "--context" && ok "help" || bad "help"

exit $fail
