/* chat/tools.c: tool calls in model output: format detection, the Hermes/Qwen JSON format
 * (<tool_call>\s*{json}\s*</tool_call>, "name" required), the Qwen XML format
 * (<function=NAME><parameter=KEY>value</parameter>), the Llama 3 JSON format and call ids.
 * Gemma 4's format is in tools_gemma.c. JSON is read with the template engine's reader, so
 * arguments print back as Python's json.dumps would (1.0 stays 1.0). */
#include "chat/tools.h"

#include "base/err.h"
#include "base/json.h"
#include "chat/tools_impl.h"

#include <stdlib.h>
#include <string.h>

enum chat_tool_format chat_tool_format_of_template(const char *tpl, size_t len) {
    if (memmem(tpl, len, "<|tool_call>", 12)) return CHAT_TOOLS_GEMMA4;
    if (memmem(tpl, len, "<tool_call>", 11))
        return memmem(tpl, len, "<function=", 10) ? CHAT_TOOLS_QWEN_XML : CHAT_TOOLS_HERMES;
    if (memmem(tpl, len, "<|python_tag|>", 14) ||
        (memmem(tpl, len, "\"parameters\"", 12) && memmem(tpl, len, "<|start_header_id|>", 19)))
        return CHAT_TOOLS_LLAMA3;
    return CHAT_TOOLS_NONE;
}

const char *chat_tool_format_name(enum chat_tool_format f) {
    switch (f) {
    case CHAT_TOOLS_HERMES:
        return "hermes";
    case CHAT_TOOLS_QWEN_XML:
        return "qwen-xml";
    case CHAT_TOOLS_GEMMA4:
        return "gemma4";
    case CHAT_TOOLS_LLAMA3:
        return "llama3";
    default:
        return "none";
    }
}

const char *chat_tool_stop_text(enum chat_tool_format f) {
    return f == CHAT_TOOLS_GEMMA4 ? "<|tool_response>" : NULL;
}

void chat_tool_call_id(uint64_t *state, char out[30]) {
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "call_", 5);
    for (int k = 0; k < 2; k++) {
        uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        for (int i = 0; i < 12; i++) out[5 + k * 12 + i] = hex[(z >> (4 * i)) & 15];
    }
    out[29] = 0;
}

void chat_tool_calls_free(struct chat_tool_calls *c) {
    for (int i = 0; i < c->n_calls; i++) {
        free(c->calls[i].name);
        free(c->calls[i].arguments);
    }
    free(c->calls);
    free(c->content);
    memset(c, 0, sizeof *c);
}

/* ---- shared helpers (tools_impl.h) ---- */

int tools_is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int tools_add(struct chat_tool_calls *out, const char *name, size_t name_len,
              const struct tv *args) {
    if (!name_len || memchr(name, 0, name_len)) return ERR_FORMAT; /* not a usable name */
    struct tpl_render r = {.max_output = (size_t)64 << 20, .max_steps = UINT64_MAX};
    struct tpl_json_opts o = {.indent = -1};
    struct tpl_buf b = {0};
    struct tv empty = {0};
    if (!args || args->t == TV_NONE || args->t == TV_UNDEF) {
        if (tv_dict_new(TD_DICT, 0, &empty)) return ERR_NOMEM;
        args = &empty;
    }
    int rc = args->t == TV_STR ? tpl_buf_put(&r, &b, args->u.s->s, args->u.s->len)
                               : tpl_to_json(&r, 0, args, &o, &b);
    tv_drop(&empty);
    if (rc) {
        tpl_buf_free(&b);
        return r.limit ? ERR_NOMEM : ERR_FORMAT;
    }
    struct chat_tool_call *nc = realloc(out->calls, (size_t)(out->n_calls + 1) * sizeof *nc);
    char *nm = malloc(name_len + 1);
    if (!nc || !nm) {
        if (nc) out->calls = nc;
        free(nm);
        tpl_buf_free(&b);
        return ERR_NOMEM;
    }
    out->calls = nc;
    memcpy(nm, name, name_len);
    nm[name_len] = 0;
    nc[out->n_calls].name = nm;
    nc[out->n_calls].arguments = b.p ? b.p : calloc(1, 1);
    if (!nc[out->n_calls].arguments) return free(nm), ERR_NOMEM;
    out->n_calls++;
    return OK;
}

int tools_set_content(struct chat_tool_calls *out, const char *s, size_t n, int trim) {
    if (trim) {
        while (n && tools_is_space(*s)) s++, n--;
        while (n && tools_is_space(s[n - 1])) n--;
        if (!n) return OK;
    }
    out->content = malloc(n + 1);
    if (!out->content) return ERR_NOMEM;
    memcpy(out->content, s, n);
    out->content[n] = 0;
    out->content_len = n;
    return OK;
}

int tools_buf_add(struct tools_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return ERR_NOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return OK;
}

/* ---- Hermes / Qwen JSON ---- */

static int hermes_block(struct chat_tool_calls *out, const char *body, size_t n) {
    while (n && tools_is_space(*body)) body++, n--;
    while (n && tools_is_space(body[n - 1])) n--;
    if (n < 2 || body[0] != '{' || body[n - 1] != '}') return 1;
    struct tv v;
    if (tpl_from_json(body, n, &v, NULL)) return 1;
    const struct tv *name = v.t == TV_DICT ? tv_dict_get_str(v.u.d, "name", 4) : NULL;
    const struct tv *args = v.t == TV_DICT ? tv_dict_get_str(v.u.d, "arguments", 9) : NULL;
    if (v.t == TV_DICT && !args) args = tv_dict_get_str(v.u.d, "parameters", 10);
    int rc = 1;
    if (name && name->t == TV_STR && name->u.s->len)
        rc = tools_add(out, name->u.s->s, name->u.s->len, args);
    tv_drop(&v);
    return rc == ERR_FORMAT ? 1 : rc;
}

static int xml_block(struct chat_tool_calls *out, const char *body, size_t n);

static int tagged(enum chat_tool_format f, const char *text, size_t len,
                  struct chat_tool_calls *out) {
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    struct tools_buf content = {0};
    size_t pos = 0;
    int changed = 0, rc = OK;
    while (!rc) {
        const char *s = memmem(text + pos, len - pos, open, sizeof open - 1);
        if (!s) {
            rc = tools_buf_add(&content, text + pos, len - pos);
            break;
        }
        size_t at = (size_t)(s - text), b = at + sizeof open - 1;
        if ((rc = tools_buf_add(&content, text + pos, at - pos))) break;
        const char *e = memmem(text + b, len - b, close, sizeof close - 1);
        if (!e) { /* a generation cut inside a call: drop the tail */
            changed = 1;
            break;
        }
        size_t end = (size_t)(e - text) + sizeof close - 1;
        int got = f == CHAT_TOOLS_QWEN_XML ? xml_block(out, text + b, (size_t)(e - text) - b)
                                           : hermes_block(out, text + b, (size_t)(e - text) - b);
        if (got < 0)
            rc = got;
        else if (got == 1)
            rc = tools_buf_add(&content, text + at, end - at); /* not a call */
        else
            changed = 1;
        pos = end;
    }
    if (!rc) rc = tools_set_content(out, content.p ? content.p : "", content.n, changed);
    free(content.p);
    return rc;
}

/* ---- Qwen XML ---- */

static int xml_value(const char *v, size_t n, struct tv *out) {
    if (n && v[0] == '\n') v++, n--;
    if (n && v[n - 1] == '\n') n--;
    if (!tpl_from_json(v, n, out, NULL)) return 0;
    return tv_str_new(v, n, out);
}

static int xml_block(struct chat_tool_calls *out, const char *body, size_t n) {
    const char *p = memmem(body, n, "<function=", 10), *end = body + n;
    if (!p) return 1;
    p += 10;
    const char *gt = memchr(p, '>', (size_t)(end - p));
    if (!gt || gt == p) return 1;
    const char *name = p;
    size_t name_len = (size_t)(gt - p);
    struct tv args;
    if (tv_dict_new(TD_DICT, 4, &args)) return ERR_NOMEM;
    p = gt + 1;
    int rc = 0;
    while (!rc) {
        const char *q = memmem(p, (size_t)(end - p), "<parameter=", 11);
        if (!q) break;
        q += 11;
        const char *kg = memchr(q, '>', (size_t)(end - q));
        const char *ve = kg ? memmem(kg + 1, (size_t)(end - kg - 1), "</parameter>", 12) : NULL;
        if (!kg || !ve) {
            rc = 1;
            break;
        }
        struct tv key, val;
        if (tv_str_new(q, (size_t)(kg - q), &key))
            rc = ERR_NOMEM;
        else if (xml_value(kg + 1, (size_t)(ve - kg - 1), &val))
            rc = (tv_drop(&key), ERR_NOMEM);
        else if (tv_dict_set(&args, key, val, NULL))
            rc = ERR_NOMEM;
        p = ve + 12;
    }
    if (!rc) rc = tools_add(out, name, name_len, &args);
    tv_drop(&args);
    return rc == ERR_FORMAT ? 1 : rc;
}

/* ---- Llama 3 JSON ---- */

/* End of the JSON object starting at s[0] == '{' (strings respected), or 0. */
size_t tools_json_object_end(const char *s, size_t n) {
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
            if (depth < 0) return 0;
        }
    }
    return 0;
}

static int llama3(const char *text, size_t len, struct chat_tool_calls *out) {
    size_t i = 0;
    while (i < len && tools_is_space(text[i])) i++;
    if (len - i >= 14 && !memcmp(text + i, "<|python_tag|>", 14)) i += 14;
    int ok = 1;
    while (ok) {
        while (i < len && (tools_is_space(text[i]) || text[i] == ';')) i++;
        if (i >= len) break;
        size_t e = text[i] == '{' ? tools_json_object_end(text + i, len - i) : 0;
        struct tv v;
        if (!e || tpl_from_json(text + i, e, &v, NULL)) {
            ok = 0;
            break;
        }
        const struct tv *name = v.t == TV_DICT ? tv_dict_get_str(v.u.d, "name", 4) : NULL;
        const struct tv *args = v.t == TV_DICT ? tv_dict_get_str(v.u.d, "parameters", 10) : NULL;
        if (v.t == TV_DICT && !args) args = tv_dict_get_str(v.u.d, "arguments", 9);
        if (!name || name->t != TV_STR || !name->u.s->len || (args && args->t != TV_DICT)) ok = 0;
        int rc = ok ? tools_add(out, name->u.s->s, name->u.s->len, args) : OK;
        tv_drop(&v);
        if (rc == ERR_NOMEM) return rc;
        if (rc) ok = 0;
        i += e;
    }
    if (ok && out->n_calls) return OK;
    chat_tool_calls_free(out);
    return tools_set_content(out, text, len, 0);
}

int chat_parse_tool_calls(enum chat_tool_format f, const char *text, size_t len,
                          struct chat_tool_calls *out) {
    memset(out, 0, sizeof *out);
    int rc;
    if (!utf8_valid(text, len)) f = CHAT_TOOLS_NONE; /* calls are only read from valid text */
    switch (f) {
    case CHAT_TOOLS_HERMES:
    case CHAT_TOOLS_QWEN_XML:
        rc = tagged(f, text, len, out);
        break;
    case CHAT_TOOLS_GEMMA4:
        rc = tools_gemma4(text, len, out);
        break;
    case CHAT_TOOLS_LLAMA3:
        rc = llama3(text, len, out);
        break;
    default:
        rc = tools_set_content(out, text, len, 0);
        break;
    }
    if (rc) chat_tool_calls_free(out);
    return rc;
}
