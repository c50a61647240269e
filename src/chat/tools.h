/* chat/tools.h: tool calls in model output, turned into OpenAI tool_calls. Formats:
 *   CHAT_TOOLS_HERMES   Qwen2.5/Qwen3/Hermes: <tool_call>{"name": ..., "arguments":
 * {...}}</tool_call> CHAT_TOOLS_QWEN_XML Qwen3-Coder/Qwen3.5:
 * <tool_call><function=NAME><parameter=K>V</parameter>
 *                       </function></tool_call>
 *   CHAT_TOOLS_GEMMA4   <|tool_call>call:NAME{key:<|"|>text<|"|>,n:3,flag:true}<tool_call|>
 *   CHAT_TOOLS_LLAMA3   {"name": ..., "parameters": {...}} (optionally after <|python_tag|>,
 *                       several separated by ';')
 * The parser never fails on model text: blocks that do not parse stay in the content, and an
 * unclosed tool-call block at the end (a truncated generation) is dropped. Text that is not
 * valid UTF-8 is returned as content without looking for calls. Arguments come out
 * as compact JSON text (json.dumps style, non-ASCII kept). Thread-safe; results are heap
 * memory released with chat_tool_calls_free(). */
#ifndef DSPARK_CHAT_TOOLS_H
#define DSPARK_CHAT_TOOLS_H

#include <stddef.h>
#include <stdint.h>

enum chat_tool_format {
    CHAT_TOOLS_NONE,
    CHAT_TOOLS_HERMES,
    CHAT_TOOLS_QWEN_XML,
    CHAT_TOOLS_GEMMA4,
    CHAT_TOOLS_LLAMA3,
};

struct chat_tool_call {
    char *name;
    char *arguments; /* JSON object text, e.g. {"city": "Paris", "days": 3} */
};

struct chat_tool_calls {
    char *content; /* the text outside the calls, trimmed; NULL when nothing is left
                      (OpenAI's content: null). Without calls: the whole text, as is. */
    size_t content_len;
    struct chat_tool_call *calls;
    int n_calls;
};

/* The format a template's text implies (looks for the markers above); CHAT_TOOLS_NONE if
 * it shows no tool-call syntax. */
enum chat_tool_format chat_tool_format_of_template(const char *tpl, size_t len);
const char *chat_tool_format_name(enum chat_tool_format f);
/* Text after which generation must stop when tools are offered (Gemma 4 writes
 * "<|tool_response>" after its calls and would go on to invent the response), or NULL. */
const char *chat_tool_stop_text(enum chat_tool_format f);

/* Splits text[0..len) into content and calls. ERR_NOMEM only; malformed calls are not an
 * error (they stay in the content). */
int chat_parse_tool_calls(enum chat_tool_format f, const char *text, size_t len,
                          struct chat_tool_calls *out);
void chat_tool_calls_free(struct chat_tool_calls *c);

/* "call_" + 24 lowercase hex digits derived from *state (advanced), NUL-terminated in out. */
void chat_tool_call_id(uint64_t *state, char out[30]);

#endif
