/* server/prompt.c: chat messages → prompt text with the model's own chat template (as
 * transformers' apply_chat_template renders it), and generated text → OpenAI tool_calls in the
 * format the template uses. A model without a chat template is prompted in the ChatML layout
 * (<|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n), without tools. */
#include "server/server_impl.h"

#include "base/err.h"
#include "base/log.h"
#include "chat/chat.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

int server_load_chat(struct server *s) {
    struct chat *c = NULL;
    int rc = chat_load(s->opts.model_dir, &c);
    if (rc == ERR_UNSUPPORTED) {
        log_info("%s has no chat template: chat requests use the ChatML layout", s->opts.model_dir);
        return OK;
    }
    if (rc) return rc;
    s->chat = c;
    return OK;
}

void server_free_chat(struct server *s) {
    chat_free(s->chat);
    s->chat = NULL;
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

static int render_chatml(const cJSON *messages, char **out, char *err, size_t cap) {
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

int server_render_chat(struct server *s, const cJSON *messages, const cJSON *tools,
                       const cJSON *kwargs, int thinking, char **out, char *err, size_t cap) {
    *out = NULL;
    if (!s->chat) return render_chatml(messages, out, err, cap);
    /* chat_template_kwargs, with enable_thinking from the request or the server default */
    cJSON *kw = kwargs ? cJSON_Duplicate(kwargs, 1) : cJSON_CreateObject();
    if (!kw) return ERR_NOMEM;
    if (!cJSON_GetObjectItemCaseSensitive(kw, "enable_thinking"))
        cJSON_AddBoolToObject(kw, "enable_thinking", thinking);
    struct chat_request req = {
        .messages = messages, .tools = tools, .add_generation_prompt = 1, .kwargs = kw};
    size_t len;
    int rc = chat_render(s->chat, &req, out, &len, err, cap);
    cJSON_Delete(kw);
    return rc == ERR_NOMEM ? ERR_NOMEM : rc ? ERR_ARG : OK;
}

int server_parse_tools(struct server *s, const char *text, char **content, cJSON **calls) {
    *calls = NULL;
    *content = NULL;
    enum chat_tool_format f = s->chat ? chat_tool_format(s->chat) : CHAT_TOOLS_HERMES;
    struct chat_tool_calls tc;
    if (chat_parse_tool_calls(f, text, strlen(text), &tc)) return ERR_NOMEM;
    if (tc.content) *content = strndup(tc.content, tc.content_len);
    if (tc.n_calls) {
        uint64_t state;
        if (getrandom(&state, sizeof state, 0) != (ssize_t)sizeof state) state = (uint64_t)rand();
        *calls = cJSON_CreateArray();
        for (int i = 0; i < tc.n_calls; i++) {
            char id[30];
            chat_tool_call_id(&state, id);
            cJSON *c = cJSON_CreateObject(), *fn;
            cJSON_AddNumberToObject(c, "index", i);
            cJSON_AddStringToObject(c, "id", id);
            cJSON_AddStringToObject(c, "type", "function");
            fn = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(fn, "name", tc.calls[i].name);
            cJSON_AddStringToObject(fn, "arguments", tc.calls[i].arguments);
            cJSON_AddItemToArray(*calls, c);
        }
    }
    chat_tool_calls_free(&tc);
    return OK;
}
