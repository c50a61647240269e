/* chat/chat.h: a model's chat template, ready to turn OpenAI chat requests into prompts.
 * chat_load() reads the template the way transformers does (chat_template.jinja, else
 * tokenizer_config.json "chat_template" as a string or as a list of {name, template} with
 * "default" and "tool_use", else chat_template.json) and the special tokens (bos_token,
 * eos_token, ...) that apply_chat_template passes to it. chat_render() normalizes the
 * messages (SPEC §6: content parts -> joined text, null/missing content -> "", tool call
 * arguments given as a JSON string -> object) and renders them like
 * tokenizer.apply_chat_template(messages, tools=..., add_generation_prompt=..., **kwargs).
 * A struct chat is immutable after loading and may be shared by threads. */
#ifndef DSPARK_CHAT_CHAT_H
#define DSPARK_CHAT_CHAT_H

#include "chat/template.h"
#include "chat/tools.h"

#include <cjson/cJSON.h>
#include <stddef.h>

struct chat;

/* Loads dir's template. ERR_IO (unreadable file), ERR_FORMAT (bad JSON, or a template that
 * does not parse: the message is logged), ERR_UNSUPPORTED (the model has no chat template). */
int chat_load(const char *dir, struct chat **out);
/* From template text and, optionally, tokenizer_config.json text for the special tokens
 * (config may be NULL). ERR_FORMAT with the syntax error in err. */
int chat_from_text(const char *tpl, size_t len, const char *config, size_t config_len,
                   struct chat **out, char *err, size_t err_cap);
void chat_free(struct chat *c); /* NULL is a no-op */

enum chat_thinking {
    CHAT_THINKING_DEFAULT, /* enable_thinking from kwargs, else undefined (template default) */
    CHAT_THINKING_ON,      /* enable_thinking = true */
    CHAT_THINKING_OFF,     /* enable_thinking = false */
};

struct chat_request {
    const cJSON *messages;       /* array of OpenAI messages (required) */
    const cJSON *tools;          /* array of OpenAI tools, or NULL (the template gets none) */
    int add_generation_prompt;   /* 1 for a chat completion */
    const cJSON *kwargs;         /* object of extra template variables (chat_template_kwargs,
                                    enable_thinking, ...), or NULL; they may override the special
                                    tokens and enable_thinking, but not messages, tools,
                                    documents or add_generation_prompt */
    enum chat_thinking thinking; /* e.g. from --no-thinking or the request's enable_thinking */
    const struct chat_render_opts *opts; /* NULL: defaults */
};

/* Renders a request into *out (heap, free()). Errors as chat_template_render: ERR_ARG with
 * the template's message (a 400 for the client), ERR_FULL, ERR_FORMAT for messages that are
 * not an array of objects, ERR_UNSUPPORTED when the model has only named templates and none
 * fits. */
int chat_render(const struct chat *c, const struct chat_request *req, char **out, size_t *out_len,
                char *err, size_t err_cap);

/* How the model writes tool calls, guessed from its template (see chat/tools.h). */
enum chat_tool_format chat_tool_format(const struct chat *c);
/* The special token text from tokenizer_config.json ("bos_token", "eos_token", ...) or NULL. */
const char *chat_special_token(const struct chat *c, const char *name);

#endif
