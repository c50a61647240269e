"""Shared constants and the Python twin of chat_template.jinja (used to render training
conversations quickly; check_template.py and the device run prove the two render alike)."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))

# Special tokens take ids 0..9 in this order.
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|MASK|>",
]
# Tokens that decoding with skip_special_tokens removes; the tag tokens stay visible.
HIDDEN_SPECIALS = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>"}
EOT_ID, IM_START_ID, IM_END_ID, MASK_ID = 0, 1, 2, 9

# Pre-tokenizer split, the one Qwen2/Qwen3 tokenizers use (so any Qwen2-style byte-level BPE
# reader handles this tokenizer): contractions, letter runs with one leading non-letter,
# single digits, punctuation runs, newline runs, whitespace runs.
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def chat_template():
    with open(os.path.join(HERE, "chat_template.jinja"), encoding="utf-8") as f:
        return f.read()


def tojson(x):
    # transformers' tojson filter: json.dumps with ensure_ascii=False and default separators.
    return json.dumps(x, ensure_ascii=False)


def _text_of(c):
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        out = []
        for p in c:
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, dict) and p.get("type") == "text":
                out.append(p.get("text", ""))
        return "".join(out)
    return ""


def render_chat(messages, tools=None, add_generation_prompt=False, enable_thinking=None):
    """Renders like chat_template.jinja (enable_thinking=None means 'not given')."""
    out = []
    if messages and messages[0]["role"] == "system":
        system_text = _text_of(messages[0].get("content"))
        turns = messages[1:]
    else:
        system_text = ""
        turns = messages
    if tools:
        out.append("<|im_start|>system\n")
        if system_text:
            out.append(system_text + "\n\n")
        out.append("# Tools\n\nYou can call the functions described below. Each one is a JSON "
                   "object inside <tools></tools>:\n<tools>")
        for t in tools:
            out.append("\n" + tojson(t))
        out.append("\n</tools>\n\nTo call a function, answer with a JSON object holding its name "
                   "and its arguments, between <tool_call></tool_call> tags:\n<tool_call>\n"
                   "{\"name\": <function name>, \"arguments\": <arguments as a JSON object>}\n"
                   "</tool_call><|im_end|>\n")
    elif system_text:
        out.append("<|im_start|>system\n" + system_text + "<|im_end|>\n")
    last_user = -1
    for i, m in enumerate(turns):
        if m["role"] == "user":
            last_user = i
    for i, m in enumerate(turns):
        body = _text_of(m.get("content"))
        role = m["role"]
        if role in ("user", "system"):
            out.append("<|im_start|>" + role + "\n" + body + "<|im_end|>\n")
        elif role == "assistant":
            rc = m.get("reasoning_content")
            reasoning = rc if isinstance(rc, str) else ""
            if "</think>" in body:
                reasoning = body.split("</think>")[0].split("<think>")[-1]
                body = body.split("</think>")[-1]
            body = body.lstrip("\n")
            out.append("<|im_start|>assistant\n")
            if i > last_user:
                out.append("<think>\n" + reasoning.strip("\n") + "\n</think>\n\n")
            out.append(body)
            for j, call in enumerate(m.get("tool_calls") or []):
                fn = call["function"] if "function" in call else call
                if body or j > 0:
                    out.append("\n")
                args = fn["arguments"]
                out.append('<tool_call>\n{"name": "' + fn["name"] + '", "arguments": ' +
                           (args if isinstance(args, str) else tojson(args)) + "}\n</tool_call>")
            out.append("<|im_end|>\n")
        elif role == "tool":
            if i == 0 or turns[i - 1]["role"] != "tool":
                out.append("<|im_start|>user")
            out.append("\n<tool_response>\n" + body + "\n</tool_response>")
            if i == len(turns) - 1 or turns[i + 1]["role"] != "tool":
                out.append("<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
        if enable_thinking is False:
            out.append("<think>\n\n</think>\n\n")
    return "".join(out)
