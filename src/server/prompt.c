/* server/prompt.c: chat messages → prompt text, and generated text → tool calls.
 * Until the model's own Jinja template is rendered here, every model is prompted in the
 * ChatML layout (<|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n), and
 * tool definitions and tool calls are not yet passed to the model. */
#include "server/server_impl.h"

#include "base/err.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int server_load_chat(struct server *s) {
    (void)s;
    return OK;
}

void server_free_chat(struct server *s) {
    (void)s;
}

struct text {
    char *buf;
    size_t len, cap;
};

static int put(struct text *t, const char *s) {
    size_t n = strlen(s);
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        while (cap < t->len + n + 1) cap *= 2;
        char *b = realloc(t->buf, cap);
        if (!b) return ERR_NOMEM;
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n + 1);
    t->len += n;
    return OK;
}

/* Message content: a string, null, or a list of parts whose text parts are joined. */
static int put_content(struct text *t, const cJSON *c, char *err, size_t cap) {
    if (!c || cJSON_IsNull(c)) return OK;
    if (cJSON_IsString(c)) return put(t, c->valuestring);
    if (!cJSON_IsArray(c)) {
        snprintf(err, cap, "message content must be a string, null or a list of parts");
        return ERR_ARG;
    }
    for (const cJSON *p = c->child; p; p = p->next) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (cJSON_IsString(type) && !strcmp(type->valuestring, "text") && cJSON_IsString(tx))
            if (put(t, tx->valuestring)) return ERR_NOMEM;
    }
    return OK;
}

int server_render_chat(struct server *s, const cJSON *messages, const cJSON *tools,
                       const cJSON *kwargs, int thinking, char **out, char *err, size_t cap) {
    (void)s, (void)tools, (void)kwargs, (void)thinking;
    struct text t = {0};
    int rc = put(&t, "");
    for (const cJSON *m = messages->child; m && !rc; m = m->next) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            snprintf(err, cap, "every message needs a string 'role'");
            rc = ERR_ARG;
            break;
        }
        if ((rc = put(&t, "<|im_start|>")) || (rc = put(&t, role->valuestring)) ||
            (rc = put(&t, "\n")) ||
            (rc = put_content(&t, cJSON_GetObjectItemCaseSensitive(m, "content"), err, cap)) ||
            (rc = put(&t, "<|im_end|>\n")))
            break;
    }
    if (!rc) rc = put(&t, "<|im_start|>assistant\n");
    if (rc) {
        free(t.buf);
        return rc;
    }
    *out = t.buf;
    return OK;
}

int server_parse_tools(struct server *s, const char *text, char **content, cJSON **calls) {
    (void)s;
    *calls = NULL;
    *content = *text ? strdup(text) : NULL;
    return OK;
}
