/* chat/tools_impl.h: helpers shared by the tool-call parsers (tools.c, tools_gemma.c). */
#ifndef DSPARK_CHAT_TOOLS_IMPL_H
#define DSPARK_CHAT_TOOLS_IMPL_H

#include "chat/tools.h"
#include "chat/tpl_impl.h"

struct tools_buf {
    char *p;
    size_t n, cap;
};

int tools_is_space(char c);
/* Appends a call; args (object value, a JSON string, or NULL for {}) is serialized. OK,
 * ERR_NOMEM, or ERR_FORMAT when args cannot be written as JSON. */
int tools_add(struct chat_tool_calls *out, const char *name, size_t name_len,
              const struct tv *args);
/* Sets out->content to s[0..n); with trim, surrounding whitespace goes and "" becomes NULL. */
int tools_set_content(struct chat_tool_calls *out, const char *s, size_t n, int trim);
int tools_buf_add(struct tools_buf *b, const char *s, size_t n);
size_t tools_json_object_end(const char *s, size_t n);
int tools_gemma4(const char *text, size_t len, struct chat_tool_calls *out);

#endif
