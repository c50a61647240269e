#!/usr/bin/env python3
"""Expected chat-template renders for tests/unit/test_chat.c, made with Python jinja2 set up
the way transformers' apply_chat_template sets it up (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and the loopcontrols extension; transformers' tojson filter;
raise_exception and strftime_now globals). strftime_now is pinned to NOW in UTC, which the C
test reproduces with TZ=UTC and chat_render_opts.now.

Every template in ../shared/templates/*.jinja plus models/pycoder's template renders every
conversation of CONVERSATIONS. The variables of a render are
    {"tools": None, "documents": None, **special_tokens, **conversation}
as in apply_chat_template(messages, tools=..., documents=..., **special_tokens_map, **kwargs).

Also renders SNIPPETS, small templates for edge cases, with VARS into
tests/data/chat/snippets.json (VARS as written in tests/data/chat/snippet_vars.json).

Writes tests/data/chat/conversations.jsonl (one conversation's variables per line) and
tests/data/chat/expected/<template>.json:
    {"template": file, "source": "shared"|"pycoder", "special": {...},
     "cases": [{"conversation": i, "name": ..., "output": text}
               | {"conversation": i, "name": ..., "error": exception class, "message": text}]}

Usage: python3 tools/chat_golden.py [--shared ../shared]
"""
import argparse
import copy
import datetime
import glob
import json
import os

import jinja2
import jinja2.ext
import jinja2.sandbox

NOW = 1721952000  # 2024-07-26 00:00:00 UTC

# Special tokens each model's tokenizer_config.json gives apply_chat_template.
SPECIAL = {
    "HuggingFaceTB-SmolLM3-3B": {"eos_token": "<|im_end|>", "pad_token": "<|im_end|>"},
    "Mistral-Small-3.2-24B-Instruct-2506": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
    "Qwen-Qwen2.5-7B-Instruct": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "Qwen-Qwen3-0.6B": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "Qwen3-Coder": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "Qwen3.5-4B": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
    "deepseek-ai-DeepSeek-V3.1": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
    "google-gemma-2-2b-it": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"},
    "google-gemma-4-31B-it": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
    "meta-llama-Llama-3.1-8B-Instruct": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "meta-llama-Llama-3.2-3B-Instruct": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "microsoft-Phi-3.5-mini-instruct": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"},
    "mistralai-Mistral-Nemo-Instruct-2407": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "openai-gpt-oss-120b": {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"},
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                "days": {"type": "integer", "description": "Forecast days", "default": 1},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Search the documentation.\n  Returns matching snippets.  ",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to look for"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Filter tags"},
                "limit": {"type": "number", "description": "Max results", "nullable": True},
                "options": {"type": "object", "properties": {"exact": {"type": "boolean"}}, "description": "More options"},
            },
            "required": ["query", "tags"],
        },
    },
}


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


SYS = "You are a careful assistant. Answer briefly."
CONVERSATIONS = [
    ("user_only", {"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": True}),
    ("system_user", {"messages": [{"role": "system", "content": SYS}, {"role": "user", "content": "What is the capital of France?"}], "add_generation_prompt": True}),
    ("multi_turn", {"messages": [
        {"role": "system", "content": SYS},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "What's 2+2?"}], "add_generation_prompt": True}),
    ("multi_turn_no_gen", {"messages": [
        {"role": "user", "content": "Name a prime number."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another one?"},
        {"role": "assistant", "content": "11"}], "add_generation_prompt": False}),
    ("thinking_off", {"messages": [{"role": "user", "content": "Quick: 3*3?"}], "add_generation_prompt": True, "enable_thinking": False}),
    ("thinking_on", {"messages": [{"role": "system", "content": "Think step by step. /think"}, {"role": "user", "content": "Is 91 prime?"}], "add_generation_prompt": True, "enable_thinking": True}),
    ("reasoning_history", {"messages": [
        {"role": "user", "content": "Is 97 prime?"},
        {"role": "assistant", "reasoning_content": "Check divisors up to 9: 2,3,5,7 do not divide 97.", "content": "Yes, 97 is prime."},
        {"role": "user", "content": "And 98?"}], "add_generation_prompt": True, "enable_thinking": True}),
    ("think_in_content", {"messages": [
        {"role": "system", "content": "Be terse. /no_think"},
        {"role": "user", "content": "Capital of Japan?"},
        {"role": "assistant", "content": "<think>\nThe user asks about Japan.\n</think>\n\nTokyo."},
        {"role": "user", "content": "And of Italy?"},
        {"role": "assistant", "content": "<think>\nItaly.\n</think>\n\nRome."}], "add_generation_prompt": False}),
    ("tools_offered", {"messages": [{"role": "system", "content": SYS}, {"role": "user", "content": "What's the weather in Paris?"}],
                       "tools": [WEATHER, SEARCH], "add_generation_prompt": True}),
    ("tool_round_trip", {"messages": [
        {"role": "user", "content": "Weather in Paris, in celsius?"},
        {"role": "assistant", "content": "", "tool_calls": [call("abc123DEF", "get_weather", {"city": "Paris", "unit": "celsius"})]},
        {"role": "tool", "tool_call_id": "abc123DEF", "name": "get_weather", "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}],
        "tools": [WEATHER], "add_generation_prompt": True}),
    ("tool_answer_followup", {"messages": [
        {"role": "system", "content": SYS},
        {"role": "user", "content": "Search the docs for 'kv cache'."},
        {"role": "assistant", "content": "Let me search.", "tool_calls": [call("q1w2e3r4t", "search_docs", {"query": "kv cache", "tags": ["memory", "perf"], "limit": 5, "options": {"exact": True}})]},
        {"role": "tool", "tool_call_id": "q1w2e3r4t", "name": "search_docs", "content": "kv cache: stores keys and values."},
        {"role": "assistant", "content": "The KV cache stores keys and values."},
        {"role": "user", "content": "Thanks! Anything else?"}], "tools": [WEATHER, SEARCH], "add_generation_prompt": True}),
    ("parallel_tool_calls", {"messages": [
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            call("call0000A", "get_weather", {"city": "Paris"}),
            call("call0000B", "get_weather", {"city": "Tokyo", "days": 2})]},
        {"role": "tool", "tool_call_id": "call0000A", "name": "get_weather", "content": "18C, cloudy"},
        {"role": "tool", "tool_call_id": "call0000B", "name": "get_weather", "content": "25C, sunny"}],
        "tools": [WEATHER], "add_generation_prompt": True}),
    ("content_parts", {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "You describe things."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": "a cat."}]}],
        "add_generation_prompt": True}),
    ("unicode", {"messages": [
        {"role": "system", "content": "Réponds en français. 日本語もOK 🎉"},
        {"role": "user", "content": "Café \"crème\" — back\\slash\ttab\nnew line ü"},
        {"role": "assistant", "content": "Voilà: «ça marche» ✓"},
        {"role": "user", "content": "  spaces around  \n"}], "add_generation_prompt": True}),
    ("unicode_tool_args", {"messages": [
        {"role": "user", "content": "Météo à Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [call("zur1ch000", "get_weather", {"city": "Zürich 東京", "days": 3, "unit": "celsius"})]},
        {"role": "tool", "tool_call_id": "zur1ch000", "name": "get_weather", "content": "{\"température\": 12.0}"}],
        "tools": [WEATHER], "add_generation_prompt": True}),
    ("numbers_and_nesting", {"messages": [
        {"role": "user", "content": "Search with options."},
        {"role": "assistant", "content": "", "tool_calls": [call("num000001", "search_docs", {"query": "q", "tags": [], "limit": 1.0, "options": {"exact": False, "score": 0.25, "big": 10000000000000000.0, "none": None}})]},
        {"role": "tool", "tool_call_id": "num000001", "name": "search_docs", "content": "[]"},
        {"role": "assistant", "content": "Nothing found."}], "tools": [SEARCH], "add_generation_prompt": False}),
    ("string_arguments", {"messages": [
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [call("str000001", "get_weather", "{\"city\": \"Rome\"}")]},
        {"role": "tool", "tool_call_id": "str000001", "name": "get_weather", "content": "30C"}],
        "tools": [WEATHER], "add_generation_prompt": True}),
    ("assistant_prefill", {"messages": [
        {"role": "user", "content": "Write a haiku about the sea."},
        {"role": "assistant", "content": "Waves fold into foam"}], "add_generation_prompt": False}),
    ("roles_not_alternating", {"messages": [
        {"role": "user", "content": "First question."},
        {"role": "user", "content": "Second question."}], "add_generation_prompt": True}),
    ("empty_messages", {"messages": [], "add_generation_prompt": True}),
    ("developer_role", {"messages": [
        {"role": "developer", "content": "Use short sentences."},
        {"role": "user", "content": "Explain gravity."}], "add_generation_prompt": True, "reasoning_effort": "low"}),
    ("no_tools_kwargs", {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True,
                         "enable_thinking": False, "tools": [], "date_string": "01 Jan 2025"}),
    ("system_only_gen", {"messages": [{"role": "system", "content": "   Padded system prompt.   "}, {"role": "user", "content": "ok"}],
                         "add_generation_prompt": False, "enable_thinking": True}),
    ("tool_multi_step", {"messages": [
        {"role": "user", "content": "Plan a trip: check weather then search."},
        {"role": "assistant", "reasoning_content": "First the weather.", "content": "", "tool_calls": [call("step00001", "get_weather", {"city": "Oslo"})]},
        {"role": "tool", "tool_call_id": "step00001", "name": "get_weather", "content": "<tool_response>-3C</tool_response>"},
        {"role": "assistant", "reasoning_content": "Now search.", "content": "", "tool_calls": [call("step00002", "search_docs", {"query": "Oslo winter", "tags": ["travel"]})]},
        {"role": "tool", "tool_call_id": "step00002", "name": "search_docs", "content": "Bring a coat."}],
        "tools": [WEATHER, SEARCH], "add_generation_prompt": True, "enable_thinking": True}),
    ("alternating_long", {"messages": [
        {"role": "user", "content": "Count with me: one."},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": "four"},
        {"role": "user", "content": "five"}], "add_generation_prompt": True}),
    ("unicode_no_system", {"messages": [
        {"role": "user", "content": "¿Qué tal? Привет! 你好 🙂"},
        {"role": "assistant", "content": "Bien — спасибо — 谢谢"},
        {"role": "user", "content": "Ω ≈ ∑ «»"}], "add_generation_prompt": True}),
    ("whitespace_user", {"messages": [
        {"role": "user", "content": "\n\n  hello  \n"},
        {"role": "assistant", "content": "  hi  "},
        {"role": "user", "content": " ? "}], "add_generation_prompt": True}),
    ("parts_user_only", {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}]}],
        "add_generation_prompt": True}),
    ("tools_no_system", {"messages": [{"role": "user", "content": "Weather in Lima?"}], "tools": [WEATHER], "add_generation_prompt": True}),
    ("tools_multi_turn", {"messages": [
        {"role": "system", "content": SYS},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi! I can check weather or search docs."},
        {"role": "user", "content": "Search for 'speculative decoding'."}], "tools": [WEATHER, SEARCH], "add_generation_prompt": True}),
    ("tools_thinking_off", {"messages": [{"role": "user", "content": "Find docs on batching."}], "tools": [SEARCH],
                            "add_generation_prompt": True, "enable_thinking": False}),
    ("tools_prefill", {"messages": [
        {"role": "user", "content": "Weather in Cairo?"},
        {"role": "assistant", "content": "I will check"}], "tools": [WEATHER], "add_generation_prompt": False}),
]


# Small templates for expression, filter, test, whitespace and error edge cases
# (tests/data/chat/snippets.json). Each renders with VARS.
VARS = {"d": {"a": 1, "b": [1, 2], "Z": None}, "l": [3, 1, 2], "s": "Hello World", "n": None,
        "t": True, "f": 1.5, "u": "héllo wörld", "e": [], "words": ["b", "A", "a", "c"],
        "people": [{"name": "Ann", "age": 31, "tags": ["x"]}, {"name": "bob", "age": 25},
                   {"name": "Cy", "age": 31, "tags": []}],
        "nested": {"x": {"y": [10, {"z": "deep"}]}}, "big": 12345678901234, "neg": -7,
        "floats": [0.1, 1e16, 1e-05, 2.0, -0.0, 123456789.125, 1.5e300]}
SNIPPETS = [
    # whitespace control
    "  {% if t %}\n    X\n  {% endif %}\n  Y {{ 'z' -}}\n   W\n",
    "a  {%- if t %} b {% endif -%}  c\n{#- comment -#}  d",
    "{%- set x = 1 -%}\n  {{ x }}  \n   {%+ if t %}A{% endif %}\n  {# c #}\nB {%- if t %}C{% endif -%}   D",
    "{% raw %}  {{ not parsed }} {% if %}{% endraw %}\nafter",
    "line1\r\nline2\rline3\n",
    "{% for i in l %}\n  - {{ i }}\n{% endfor %}\n",
    "{{ 'a' }}\n{{ 'b' }}\n\n",
    # scoping
    "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }},{% endfor %}{{ x }}",
    "{% for i in range(3) %}{% if i == 0 %}{% set y = 5 %}{% endif %}{{ y }},{% endfor %}",
    "{% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}{% set x = 2 %}{{ m() }}{% for i in [1] %}{% set x = 3 %}{{ m() }}{% endfor %}",
    "{% set ns = namespace(a=1, b=[]) %}{% for i in l %}{% set ns.a = ns.a * i %}{% set ns.b = ns.b + [i] %}{% endfor %}{{ ns.a }}{{ ns.b }}{{ ns }}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}",
    # loops
    "{% for a in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.revindex }}{{ loop.revindex0 }}|{% endfor %}",
    "{% for a in [1,2,3,4,5] if a is odd %}{{ loop.index }}:{{ a }}{{ '.' if loop.last }}{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% else %}none{% endfor %}{% for x in e %}x{% else %}empty{% endfor %}",
    "{% for i in range(10) %}{% if i is even %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% for c in 'héllo' %}[{{ c }}]{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
    "{% for a, b in [[1, 2], ('x', 'y')] %}{{ a }}{{ b }}{% endfor %}{% for x in l %}{{ loop.cycle('o', 'e') }}{% endfor %}",
    "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}",
    # printing values
    "{{ d }}|{{ l }}|{{ n }}|{{ t }}|{{ f }}|{{ (1, 'a') }}|{{ (1,) }}|{{ () }}|{{ [n, t, 'it\\'s', \"q\\\"\"] }}",
    "{{ floats }}|{% for x in floats %}{{ x }} {% endfor %}|{{ floats | tojson }}",
    "{{ 1.0 }} {{ 10 / 4 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 0.1 + 0.2 }}",
    "{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ not 1 == 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 + 2 * 3 }} {{ 10 - 2 - 3 }} {{ 'a' ~ 2 * 3 }} {{ 1 if n else 2 }}",
    "{{ ['a\\n', '\\t\\x01', 'é\\u200b\\xa0', '\\\\'] }}{{ {'k': 'v', 1: 2, none: true, 1.5: n} }}{{ d.items() }}{{ d.keys() }}{{ d.values() }}",
    "{{ range(3) }}{{ range(1, 10, 3) | list }}{{ namespace(a=1) }}{{ 'x' * 3 }}{{ [1] * 2 }}{{ [1] + [2] }}",
    "{{ big }} {{ big * 1000 }} {{ neg | abs }} {{ -neg }} {{ +f }} {{ 3 / 0.5 }}",
    # undefined
    "[{{ missing }}][{{ d.zz }}][{{ d['zz'] }}][{{ l[10] }}][{{ n.x }}][{{ missing is defined }}{{ d.zz is undefined }}]",
    "{% if missing %}y{% else %}n{% endif %}{{ missing | default('dflt') }}{{ '' | default('e', true) }}{{ n | d('x') }}{{ missing | length }}{{ missing | list }}{{ 'x' in missing }}",
    "{{ missing == missing }}{{ missing != none }}{{ missing ~ 'a' }}{{ missing | string }}{{ missing | join(',') }}{{ missing is iterable }}{{ missing is sequence }}{{ missing is callable }}",
    # strings
    "{{ s.startswith('He') }}{{ s.endswith(('x', 'ld')) }}{{ s.upper() }}{{ s.lower() }}{{ s.title() }}{{ 'hello world'.capitalize() }}{{ s.swapcase() }}",
    "{{ s.find('o') }}{{ s.rfind('o') }}{{ s.find('o', 5) }}{{ s.find('zz') }}{{ s.count('o') }}{{ s.count('') }}{{ s.index('W') }}{{ u.find('w') }}",
    "{{ s.split() }}{{ s.split('o') }}{{ s.split('o', 1) }}{{ s.rsplit('o', 1) }}{{ '  a  b '.split() }}{{ '  a  b '.split(none, 1) }}{{ '  a  b '.rsplit(none, 1) }}{{ 'a,,b'.split(',') }}{{ ''.split(',') }}{{ ''.split() }}",
    "{{ '  x '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\tpad\\n'.lstrip() }}|{{ 'abcba'.rstrip('ab') }}|{{ ' \\u3000wide\\xa0'.strip() }}",
    "{{ 'a\\nb\\r\\nc\\rd'.splitlines() }}{{ 'a\\nb\\n'.splitlines(true) }}{{ s.replace('o', '0') }}{{ s.replace('o', '0', 1) }}{{ 'ab'.replace('', '-') }}{{ s.replace('', '|', 2) }}",
    "{{ u[1] }}{{ u[-1] }}{{ u[1:4] }}{{ u[::-1] }}{{ u[::2] }}{{ s[100:] }}{{ s[-3:] }}{{ l[1:] }}{{ l[::-1] }}{{ l[5:1:-1] }}{{ u | length }}{{ u.upper() }}",
    "{{ 'ab'.center(7, '*') }}|{{ 'ab'.ljust(5) }}|{{ 'ab'.rjust(5, '.') }}|{{ '-42'.zfill(6) }}|{{ 'a,b,c'.partition(',') }}{{ 'a,b,c'.rpartition(',') }}{{ 'abc'.partition('x') }}",
    "{{ 'x'.join(['a', 'b']) }}{{ 'pre_x'.removeprefix('pre_') }}{{ 'abc'.isalpha() }}{{ '12'.isdigit() }}{{ 'ab'.islower() }}{{ 'AB1'.isupper() }}{{ ' '.isspace() }}{{ ''.isalnum() }}{{ 'Title Case'.istitle() }}",
    "{{ '{} and {}'.format(1, 'x') }}{{ '{0}{1}{0}'.format('a', 'b') }}{{ '{name}!'.format(name='hi') }}{{ '%s-%d' % ('a', 3) }}{{ '%05.2f|%x' % (3.14159, 255) }}{{ '%(a)s' % {'a': 1} }}",
    "{{ 'a' 'b' }}{{ \"it's\" }}{{ 'tab\\tq\\'' }}{{ '\\u00e9\\x41\\101\\q' }}",
    # filters
    "{{ l | sort }}{{ l | sort(reverse=true) }}{{ words | sort }}{{ words | sort(case_sensitive=true) }}{{ people | sort(attribute='age') | map(attribute='name') | list }}{{ people | sort(attribute='age,name') | map(attribute='name') | join(',') }}",
    "{{ {'b': 1, 'A': 2, 'a': 3} | dictsort }}{{ {'b': 1, 'A': 2} | dictsort(true) }}{{ {'b': 1, 'a': 2} | dictsort(by='value', reverse=true) }}",
    "{{ people | map(attribute='name') | join(', ') }}|{{ people | map(attribute='tags.0', default='-') | list }}|{{ words | map('upper') | list }}|{{ ['a'] | map('replace', 'a', 'b') | list }}",
    "{{ people | selectattr('age', 'equalto', 31) | map(attribute='name') | list }}{{ people | rejectattr('tags') | list | length }}{{ people | selectattr('tags', 'defined') | list | length }}{{ [1, 0, '', 3] | select | list }}{{ l | reject('odd') | list }}{{ l | select('gt', 1) | list }}",
    "{{ l | first }}{{ l | last }}{{ l | length }}{{ l | count }}{{ e | first is undefined }}{{ l | min }}{{ l | max }}{{ words | max }}{{ words | min(case_sensitive=true) }}{{ l | sum }}{{ people | sum(attribute='age') }}",
    "{{ [1, 1, 2, 'a', 'A'] | unique | list }}{{ l | reverse | list }}{{ 'abc' | reverse }}{{ d | list }}{{ 'ab' | list }}{{ l | join }}{{ l | join('-') }}",
    "{{ -3 | abs }}{{ 2.5 | round }}{{ 3.5 | round }}{{ 2.567 | round(2) }}{{ 2.675 | round(2) }}{{ 2.5 | round(0, 'floor') }}{{ 2.1 | round(0, 'ceil') }}{{ 7 | round }}{{ 1234.5 | round(-2) }}",
    "{{ '3' | int }}{{ 'x' | int }}{{ '3.9' | int }}{{ 3.9 | int }}{{ '0x1A' | int }}{{ '0x1A' | int(base=16) }}{{ ' 12 ' | int }}{{ '1_0' | int }}{{ 'x' | int(7) }}{{ true | int }}{{ n | int }}",
    "{{ '3.5' | float }}{{ 'x' | float }}{{ 3 | float }}{{ '1e3' | float }}{{ ' -2.5 ' | float }}{{ 'inf' | float }}",
    "{{ 'hello' | upper }}{{ 'HeLLo' | lower }}{{ 'hello wORLD-foo(bar) x_y' | title }}{{ 'hello World' | capitalize }}{{ '  a  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'a b' | replace(' ', '_') }}{{ 'a b  c' | wordcount }}",
    "{{ 'a\\nb' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'a\\nb' | indent('> ') }}|{{ 'ab' | center(6) }}|",
    "{{ d | tojson }}{{ d | tojson(indent=2) }}{{ 'é<>&\\'\\n' | tojson }}{{ [] | tojson(indent=2) }}{{ {} | tojson }}{{ nested | tojson(indent='\\t') }}{{ d | tojson(sort_keys=true) }}{{ d | tojson(separators=(',', ':')) }}{{ 'é' | tojson(ensure_ascii=true) }}",
    "{{ people | tojson(indent=4) }}",
    "{{ [1, 2, 3, 4, 5] | batch(2) | list }}{{ [1, 2, 3, 4, 5] | batch(2, 'x') | list }}{{ [1, 2, 3, 4, 5] | slice(2) | list }}{{ [1, 2, 3, 4] | slice(3, 0) | list }}",
    "{{ '<a>&\"\\'' | escape }}{{ '<a>' | safe }}{{ 'a' | safe + '<b>' }}|{{ '<b>' + 'a' | safe }}|{{ ('a' | safe) ~ '<b>' }}|{{ '%s' | format('<x>') }}{{ '%s=%d' | format('k', 2) }}",
    "{{ d | items | list }}{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}{{ d | attr('a') }}{{ d.get('a') }}{{ d.get('q') }}{{ d.get('q', 5) }}{{ l.index(1) }}{{ l.count(3) }}",
    # tests
    "{{ 'aBc' is lower }}{{ 'abc' is lower }}{{ 3 is divisibleby 3 }}{{ 3 is divisibleby(2) }}{{ n is none }}{{ t is boolean }}{{ 1 is boolean }}{{ t is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ {} is sequence }}{{ 'a' is sequence }}{{ 3 is iterable }}",
    "{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ 2 is ge 2 }}{{ 1 is lt 2 }}{{ 1 is le 0 }}{{ 1 is ne 2 }}{{ 2 is in [1, 2] }}{{ 'a' is in 'abc' }}{{ t is true }}{{ 1 is true }}{{ false is false }}{{ n is sameas none }}{{ range is callable }}{{ 'x' is callable }}{{ d is mapping }}{{ l is mapping }}{{ 'upper' is filter }}{{ 'odd' is test }}{{ 'nope' is filter }}",
    "{{ 1 is odd }}{{ 2 is even }}{{ 1.5 is odd }}{{ -3 is odd }}{{ s is string }}{{ d is not none }}{{ l is not string and l is iterable }}",
    "{{ 'b' in 'abc' }}{{ 1 in l }}{{ 'a' in d }}{{ 'z' not in 'abc' }}{{ [1, 2] == [1, 2] }}{{ {'a': 1} == {'a': 1} }}{{ 1 == 1.0 }}{{ t == 1 }}{{ 'a' == 1 }}{{ (1, 2) == [1, 2] }}{{ people[0] == people[0] }}",
    "{{ t and 'x' }}|{{ false or 'y' }}|{{ '' or [] }}|{{ 0 and 1 }}|{{ not 'a' }}|{{ 'x' if false }}|{{ ('x' if false) is defined }}",
    "{{ 'abc' < 'abd' }}{{ [1, 2] < [1, 3] }}{{ (1, 'a') < (1, 'b') }}{{ 1 < 1.5 }}{{ 'B' < 'a' }}",
    # macros and calls
    "{% macro m(a, b=2, c='z') %}{{ a }}{{ b }}{{ c }}{{ caller() if caller is defined }}{% endmacro %}{{ m(1) }}{{ m(1, c=3) }}{{ m(1, 2, 3) }}{% call m(0) %}inner{% endcall %}",
    "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, x=3) }}{{ m() }}|{{ m }}",
    "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
    "{% macro g() %}({{ caller(7) }}|{{ caller(8) }}){% endmacro %}{% call(x) g() %}[{{ x }}]{% endcall %}",
    "{% macro list_of(items) %}{% for i in items %}<{{ i }}>{% endfor %}{% endmacro %}{% set out = list_of(l) %}{{ out | length }}{{ out }}{{ list_of(l) | upper }}",
    "{% set x %}block {{ 1 + 1 }}{% endset %}{{ x }}|{% set y | upper | trim %}  abc  {% endset %}[{{ y }}]|{% filter upper %}hi {{ s }}{% endfilter %}",
    "{{ dict(a=1, b=[2]) }}{{ dict(d, c=3) }}{{ namespace(d).a }}{% set n2 = namespace() %}{% set n2.k = 'v' %}{{ n2.k }}{{ n2['k'] }}{{ n2.missing is defined }}",
    "{{ strftime_now('%Y-%m-%d %H:%M %a %b') }}|{{ raise_exception is defined }}|{{ range(2, -3, -2) | list }}",
    # errors jinja2 raises (the C side must fail too)
    "{{ raise_exception('custom message: ' ~ l | length) }}",
    "{{ missing.attr }}",
    "{{ missing + 1 }}",
    "{{ 'a' + 1 }}",
    "{{ 1 / 0 }}",
    "{{ 1 < 'a' }}",
    "{{ 1 in 'abc' }}",
    "{% for x in n %}{% endfor %}",
    "{{ d.zz.yy }}",
    "{{ l.append(4) }}",
    "{{ range(200000) | length }}",
    "{{ 'x' is odd }}",
    "{{ s[1:2:0] }}",
    "{{ n[1:] }}",
    "{{ l['a':] }}",
    "{{ d[1:] }}",
    "{{ d.items()[0] }}|{{ (range(5))[1:3] | list }}|{{ d.keys() | list }}",
    "{{ ((1 if d.a else 'ab') | select) is not string }}{{ (neg | batch(2)) is defined }}{{ range(3) == range(3) }}{{ [0, 1, 2] == range(3) }}",
    "{{ (neg | batch(2)) | list }}",
    "{{ l | indent }}",
    "{{ l > d.values() }}",
    "{{ words | sort(attribute='x') }}{{ (words | map('upper')) in d }}{{ '%d|%i' % (2.5, 3.9) }}",
    "{{ '%x' % 2.5 }}",
    "{{ [{'x': 1}, 'a'] | sort(attribute='x') }}",
    "{% for a, b in [[1, 2, 3]] %}{% endfor %}",
    "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}",
    "{% macro m(a) %}{% endmacro %}{{ m(1, x=2) }}",
    "{{ n | tojson }}{{ missing | tojson }}",
    "{{ d | dictsort(by='nope') }}",
    "{{ l | map | list }}",
    "{{ missing() }}",
    "{{ 5() }}",
    "{{ 'abc'.index('z') }}",
    "{{ x is nosuchtest }}",
    "{% set d.a = 1 %}",
    "{{ ''.split('') }}",
    "{{ [[1], 1] | sort }}",
    "{{ {[1]: 2} }}",
]


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc).strftime(fmt)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def pycoder_template(root):
    with open(os.path.join(root, "models/pycoder/tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    special = {}
    for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        v = cfg.get(k)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            special[k] = v
    if isinstance(cfg.get("additional_special_tokens"), list):
        special["additional_special_tokens"] = cfg["additional_special_tokens"]
    return cfg["chat_template"], special


def render_cases(env, source, special):
    tpl = env.from_string(source)
    cases = []
    for i, (name, conv) in enumerate(CONVERSATIONS):
        ctx = copy.deepcopy({"tools": None, "documents": None, **special, **conv})
        case = {"conversation": i, "name": name}
        try:
            case["output"] = tpl.render(**ctx)
        except Exception as e:  # the C side must fail too (same message for raise_exception)
            case["error"] = type(e).__name__
            case["message"] = str(e)
        cases.append(case)
    return cases


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(root, "..", "shared"))
    args = ap.parse_args()
    out_dir = os.path.join(root, "tests/data/chat/expected")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(root, "tests/data/chat/conversations.jsonl"), "w", encoding="utf-8") as f:
        for name, conv in CONVERSATIONS:
            f.write(json.dumps(conv, ensure_ascii=False) + "\n")
    env = make_env()
    jobs = []
    for path in sorted(glob.glob(os.path.join(args.shared, "templates", "*.jinja"))):
        stem = os.path.basename(path)[: -len(".jinja")]
        with open(path, encoding="utf-8") as f:
            jobs.append((stem, os.path.basename(path), "shared", f.read(), SPECIAL.get(stem, {})))
    src, special = pycoder_template(root)
    jobs.append(("pycoder", "models/pycoder/tokenizer_config.json", "pycoder", src, special))
    snippets = []
    for src in SNIPPETS:
        case = {"template": src}
        try:
            case["output"] = env.from_string(src).render(**copy.deepcopy(VARS))  # filters may mutate
        except Exception as e:
            case["error"] = type(e).__name__
            case["message"] = str(e)
        snippets.append(case)
    with open(os.path.join(root, "tests/data/chat/snippets.json"), "w", encoding="utf-8") as f:
        json.dump({"now": NOW, "cases": snippets}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(root, "tests/data/chat/snippet_vars.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(VARS, ensure_ascii=False) + "\n")
    print(f"snippets: {len(snippets)} ({sum('error' in c for c in snippets)} raise)")
    for stem, file, source, text, special in jobs:
        cases = render_cases(env, text, special)
        doc = {"template": file, "source": source, "jinja2": jinja2.__version__, "now": NOW,
               "special": special, "cases": cases}
        with open(os.path.join(out_dir, stem + ".json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
        n_err = sum("error" in c for c in cases)
        print(f"{stem}: {len(cases)} conversations, {n_err} raise")


if __name__ == "__main__":
    main()
