/* chat/tools_gemma.c: Gemma 4 tool calls: <|tool_call>call:NAME{key:value,...}<tool_call|>.
 * Strings are wrapped in <|"|> ... <|"|> (kept verbatim); other scalars are bare: true,
 * false, null and numbers become JSON values, anything else a string; {...} and [...] nest.
 * Keys are bare or <|"|>-quoted. The model then writes <|tool_response>, which is removed. */
#include "chat/tools_impl.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

#define QUOTE     "<|\"|>"
#define QUOTE_LEN 5

struct gp {
    const char *p, *end;
    int depth;
};

static void skip_ws(struct gp *g) {
    while (g->p < g->end && tools_is_space(*g->p)) g->p++;
}

static int at_quote(const struct gp *g) {
    return g->end - g->p >= QUOTE_LEN && !memcmp(g->p, QUOTE, QUOTE_LEN);
}

/* A <|"|>-quoted string; -1 when unterminated. */
static int quoted(struct gp *g, struct tv *out) {
    const char *s = g->p + QUOTE_LEN;
    const char *e = memmem(s, (size_t)(g->end - s), QUOTE, QUOTE_LEN);
    if (!e) return -1;
    g->p = e + QUOTE_LEN;
    return tv_str_new(s, (size_t)(e - s), out) ? -2 : 0;
}

static int value(struct gp *g, struct tv *out);

static int container(struct gp *g, struct tv *out) {
    int obj = *g->p == '{';
    char close = obj ? '}' : ']';
    if (++g->depth > 64) return -1;
    g->p++;
    if (obj ? tv_dict_new(TD_DICT, 4, out) : tv_list_new(TL_LIST, 4, out)) return -2;
    skip_ws(g);
    if (g->p < g->end && *g->p == close) {
        g->p++;
        g->depth--;
        return 0;
    }
    while (1) {
        struct tv k = {0}, v;
        int rc = 0;
        skip_ws(g);
        if (obj) {
            if (at_quote(g)) {
                rc = quoted(g, &k);
            } else {
                const char *s = g->p;
                while (g->p < g->end && *g->p != ':' && *g->p != ',' && *g->p != '}') g->p++;
                const char *e = g->p;
                while (e > s && tools_is_space(e[-1])) e--;
                rc = e == s ? -1 : tv_str_new(s, (size_t)(e - s), &k) ? -2 : 0;
            }
            skip_ws(g);
            if (!rc && (g->p >= g->end || *g->p++ != ':')) rc = -1;
        }
        if (!rc) rc = value(g, &v);
        if (rc) {
            tv_drop(&k);
            tv_drop(out);
            return rc;
        }
        if (obj ? tv_dict_set(out, k, v, NULL) : tv_list_push(out, v)) return tv_drop(out), -2;
        skip_ws(g);
        if (g->p < g->end && *g->p == ',') {
            g->p++;
            continue;
        }
        if (g->p < g->end && *g->p == close) break;
        tv_drop(out);
        return -1;
    }
    g->p++;
    g->depth--;
    return 0;
}

static int value(struct gp *g, struct tv *out) {
    skip_ws(g);
    if (g->p >= g->end) return -1;
    if (at_quote(g)) return quoted(g, out);
    if (*g->p == '{' || *g->p == '[') return container(g, out);
    const char *s = g->p;
    while (g->p < g->end && *g->p != ',' && *g->p != '}' && *g->p != ']') g->p++;
    const char *e = g->p;
    while (e > s && tools_is_space(e[-1])) e--;
    if (e == s) return -1;
    if (!tpl_from_json(s, (size_t)(e - s), out, NULL)) {
        if (out->t != TV_STR && out->t != TV_LIST && out->t != TV_DICT) return 0;
        tv_drop(out);
    }
    return tv_str_new(s, (size_t)(e - s), out) ? -2 : 0;
}

/* body is what lies between <|tool_call> and <tool_call|>. 1: not a call. */
static int one_call(struct chat_tool_calls *out, const char *body, size_t n) {
    while (n && tools_is_space(*body)) body++, n--;
    if (n < 5 || memcmp(body, "call:", 5)) return 1;
    const char *name = body + 5, *brace = memchr(name, '{', n - 5);
    if (!brace || brace == name) return 1;
    struct gp g = {.p = brace, .end = body + n};
    struct tv args;
    int rc = container(&g, &args);
    if (rc == -2) return ERR_NOMEM;
    if (rc) return 1;
    skip_ws(&g);
    if (g.p != g.end) {
        tv_drop(&args);
        return 1;
    }
    const char *ne = brace;
    while (ne > name && tools_is_space(ne[-1])) ne--;
    rc = tools_add(out, name, (size_t)(ne - name), &args);
    tv_drop(&args);
    return rc == ERR_FORMAT ? 1 : rc;
}

int tools_gemma4(const char *text, size_t len, struct chat_tool_calls *out) {
    static const char open[] = "<|tool_call>", close[] = "<tool_call|>",
                      resp[] = "<|tool_response>";
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
        if (!e) {
            changed = 1;
            break;
        }
        size_t end = (size_t)(e - text) + sizeof close - 1;
        int got = one_call(out, text + b, (size_t)(e - text) - b);
        if (got < 0)
            rc = got;
        else if (got == 1)
            rc = tools_buf_add(&content, text + at, end - at);
        else
            changed = 1;
        pos = end;
    }
    if (!rc && out->n_calls && content.n) { /* the stop marker after the calls */
        char *m;
        while ((m = memmem(content.p, content.n, resp, sizeof resp - 1))) {
            size_t off = (size_t)(m - content.p);
            memmove(m, m + sizeof resp - 1, content.n - off - (sizeof resp - 1));
            content.n -= sizeof resp - 1;
        }
    }
    if (!rc) rc = tools_set_content(out, content.p ? content.p : "", content.n, changed);
    free(content.p);
    return rc;
}
