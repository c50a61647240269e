"""Checks that chat_template.jinja, rendered as transformers renders chat templates, equals
common.render_chat on a fixed set of conversations (and, with --tokenizer DIR, that
AutoTokenizer.apply_chat_template on the saved tokenizer gives the same text)."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import chat_template, render_chat  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}},
         {"type": "function", "function": {"name": "add", "description": "Adds two numbers: é ü",
          "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                          "b": {"type": "integer"}}}}}]
CASES = [
    dict(messages=[{"role": "user", "content": "hi"}]),
    dict(messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True),
    dict(messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True, enable_thinking=False),
    dict(messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True, enable_thinking=True),
    dict(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                   {"role": "assistant", "content": "Hello!"}]),
    dict(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x"}],
         tools=TOOLS, add_generation_prompt=True),
    dict(messages=[{"role": "user", "content": "x"}], tools=TOOLS),
    dict(messages=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nb"},
                   {"role": "user", "content": "c"}, {"role": "assistant", "content": "d",
                                                     "reasoning_content": "\nwhy\n"}]),
    dict(messages=[{"role": "user", "content": [{"type": "text", "text": "part one "},
                                                {"type": "text", "text": "two"}]}],
         add_generation_prompt=True),
    dict(messages=[{"role": "user", "content": "weather?"},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "c1", "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                       {"id": "c2", "type": "function",
                        "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                   {"role": "tool", "tool_call_id": "c2", "content": "3"},
                   {"role": "assistant", "content": "Sunny, and 3."}], tools=TOOLS),
    dict(messages=[{"role": "user", "content": "q"},
                   {"role": "assistant", "content": "let me check", "tool_calls": [
                       {"function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
                   {"role": "tool", "content": "3"}], tools=TOOLS, add_generation_prompt=True,
         enable_thinking=False),
    dict(messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "u1"},
                   {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
                   {"role": "system", "content": "s2"}, {"role": "user", "content": "u2"}],
         add_generation_prompt=True),
]


def jinja_render(case):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
    kw = {k: v for k, v in case.items()}
    return env.from_string(chat_template()).render(**kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", help="a saved model folder: also compare apply_chat_template")
    ap.add_argument("--show", action="store_true")
    args = ap.parse_args()
    tok = None
    if args.tokenizer:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(args.tokenizer)
    bad = 0
    for i, case in enumerate(CASES):
        mine = render_chat(case["messages"], tools=case.get("tools"),
                           add_generation_prompt=case.get("add_generation_prompt", False),
                           enable_thinking=case.get("enable_thinking"))
        ref = jinja_render(case)
        if args.show:
            print(f"--- case {i}\n{ref}", end="")
        if ref != mine:
            bad += 1
            print(f"case {i}: jinja2 and render_chat differ\n{ref!r}\n{mine!r}")
        if tok is not None:
            kw = {k: v for k, v in case.items() if k not in ("messages", "tools")}
            hf = tok.apply_chat_template(case["messages"], tools=case.get("tools"), tokenize=False, **kw)
            if hf != ref:
                bad += 1
                print(f"case {i}: apply_chat_template differs\n{hf!r}\n{ref!r}")
    if tok is not None:
        from tokenizers import Tokenizer
        raw = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
        texts = [render_chat(c["messages"], tools=c.get("tools")) for c in CASES] + [
            "def f(x):\n\treturn x**2  # square\n", "  \n\n    if a:\r\n", "naïve café 数字 😀 e\u0301",
            "<|im_start|>user<think></think><|MASK|><|endoftext|>", "x = 12345 + 0.5e-3"]
        for t in texts:
            a = tok(t, add_special_tokens=False)["input_ids"]
            b = raw.encode(t, add_special_tokens=False).ids
            if a != b:
                bad += 1
                print(f"AutoTokenizer and tokenizers differ on {t!r}:\n{a}\n{b}")
            elif tok.decode(a) != raw.decode(b, skip_special_tokens=False):
                bad += 1
                print(f"decode differs on {t!r}")
        print("special ids:", tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                                        "<think>", "<|MASK|>"]),
              "eos", tok.eos_token, tok.eos_token_id, "pad", tok.pad_token_id, "bos", tok.bos_token_id)
        print("tokens:", raw.encode(texts[-4]).tokens)
    print(f"chat template check: {len(CASES) - bad} passed, {bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
