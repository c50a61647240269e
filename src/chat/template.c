/* chat/template.c: the public template API: parse (normalize newlines, lex, parse into the
 * template's arena) and render (context to values, run with budgets, tear down the values
 * that may form cycles, hand the output to the caller). */
#include "chat/template.h"

#include "base/err.h"
#include "base/json.h"
#include "chat/tpl_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct chat_template {
    struct tpl_arena arena;
    struct tpl_node *body;
};

static _Thread_local int last_raised;

int chat_template_last_raised(void) {
    return last_raised;
}

int chat_template_parse(const char *src, size_t len, struct chat_template **out, char *err,
                        size_t err_cap) {
    char dummy[8];
    if (!err || !err_cap) err = dummy, err_cap = sizeof dummy;
    err[0] = 0;
    *out = NULL;
    if (!utf8_valid(src, len)) {
        snprintf(err, err_cap, "template syntax error: the template is not valid UTF-8");
        return ERR_FORMAT;
    }
    struct chat_template *t = calloc(1, sizeof *t);
    if (!t) return ERR_NOMEM;
    size_t n;
    char *norm = tpl_normalize(&t->arena, src, len, &n);
    struct tpl_tokens toks = {0};
    int rc = OK;
    if (!norm)
        rc = ERR_NOMEM;
    else if (tpl_lex(norm, n, &t->arena, &toks, err, err_cap) ||
             tpl_parse(&toks, &t->arena, &t->body, err, err_cap))
        rc = strstr(err, "out of memory") ? ERR_NOMEM : ERR_FORMAT;
    free(toks.v);
    if (rc) {
        chat_template_free(t);
        return rc;
    }
    *out = t;
    return OK;
}

void chat_template_free(struct chat_template *t) {
    if (!t) return;
    tpl_arena_free(&t->arena);
    free(t);
}

/* Breaks the cycles macros (closure scopes) and namespaces may form, then frees all. */
static void teardown(struct tpl_render *r) {
    if (r->keep.t == TV_LIST) {
        struct tv_list *l = r->keep.u.l;
        for (size_t i = 0; i < l->n; i++)
            if (l->v[i].t == TV_DICT) tpl_dict_clear(l->v[i].u.d);
        for (size_t i = 0; i < l->n; i++)
            if (l->v[i].t == TV_FUNC && l->v[i].u.fn->closure) {
                struct tpl_scope *s = l->v[i].u.fn->closure;
                l->v[i].u.fn->closure = NULL;
                tpl_scope_release(s);
            }
    }
    tpl_scope_release(r->root);
    r->root = NULL;
    tv_drop(&r->keep);
    tv_drop(&r->ctx);
}

static int render(const struct chat_template *t, struct tv ctx, const struct chat_render_opts *opts,
                  struct tv_budget *budget, char **out, size_t *out_len, char *err,
                  size_t err_cap) {
    struct chat_render_opts o = opts ? *opts : (struct chat_render_opts){0};
    struct tpl_render r = {0};
    r.ctx = ctx;
    r.max_steps = o.max_steps ? o.max_steps : 50000000;
    r.max_output = o.max_output ? o.max_output : (size_t)32 << 20;
    r.max_depth = o.max_depth > 0 ? o.max_depth : 100;
    r.now = o.now ? (time_t)o.now : time(NULL);
    struct tpl_buf b = {0};
    int rc = OK;
    r.root = tpl_scope_new(NULL);
    if (!r.root)
        rc = ERR_NOMEM;
    else if (tpl_exec(&r, r.root, t->body, &b))
        rc = -1;
    teardown(&r);
    tv_budget_end();
    last_raised = r.raised;
    if (rc == -1) {
        tpl_buf_free(&b);
        if (r.raised)
            snprintf(err, err_cap, "%s", r.err);
        else
            snprintf(err, err_cap, "template error at line %d: %s", r.err_line, r.err);
        (void)budget;
        return r.raised ? ERR_ARG : r.limit ? ERR_FULL : ERR_ARG;
    }
    if (rc) {
        tpl_buf_free(&b);
        snprintf(err, err_cap, "out of memory");
        return rc;
    }
    if (!b.p) {
        b.p = malloc(1);
        if (!b.p) return ERR_NOMEM;
        b.p[0] = 0;
    }
    *out = b.p;
    if (out_len) *out_len = b.n;
    return OK;
}

static size_t memory_cap(const struct chat_render_opts *opts) {
    return opts && opts->max_memory ? opts->max_memory : (size_t)512 << 20;
}

int chat_template_render(const struct chat_template *t, const cJSON *context,
                         const struct chat_render_opts *opts, char **out, size_t *out_len,
                         char *err, size_t err_cap) {
    char dummy[8];
    if (!err || !err_cap) err = dummy, err_cap = sizeof dummy;
    err[0] = 0;
    *out = NULL;
    last_raised = 0;
    struct tv_budget budget = {0, memory_cap(opts)};
    tv_budget_begin(&budget);
    struct tv ctx;
    if (!cJSON_IsObject(context) || tpl_from_cjson(context, &ctx, 0)) {
        tv_budget_end();
        snprintf(err, err_cap, "the template context must be a JSON object with valid UTF-8");
        return ERR_FORMAT;
    }
    return render(t, ctx, opts, &budget, out, out_len, err, err_cap);
}

int chat_template_render_json(const struct chat_template *t, const char *context_json, size_t len,
                              const struct chat_render_opts *opts, char **out, size_t *out_len,
                              char *err, size_t err_cap) {
    char dummy[8];
    if (!err || !err_cap) err = dummy, err_cap = sizeof dummy;
    err[0] = 0;
    *out = NULL;
    last_raised = 0;
    struct tv_budget budget = {0, memory_cap(opts)};
    tv_budget_begin(&budget);
    struct tv ctx;
    const char *why = NULL;
    if (tpl_from_json(context_json, len, &ctx, &why) || ctx.t != TV_DICT) {
        if (!why) tv_drop(&ctx);
        tv_budget_end();
        snprintf(err, err_cap, "the template context must be a JSON object (%s)",
                 why ? why : "not an object");
        return ERR_FORMAT;
    }
    return render(t, ctx, opts, &budget, out, out_len, err, err_cap);
}

int tpl_render_built(const struct chat_template *t,
                     int (*build)(void *arg, struct tv *ctx, char *err, size_t err_cap), void *arg,
                     const struct chat_render_opts *opts, char **out, size_t *out_len, char *err,
                     size_t err_cap) {
    char dummy[8];
    if (!err || !err_cap) err = dummy, err_cap = sizeof dummy;
    err[0] = 0;
    *out = NULL;
    last_raised = 0;
    struct tv_budget budget = {0, memory_cap(opts)};
    tv_budget_begin(&budget);
    struct tv ctx;
    int rc = build(arg, &ctx, err, err_cap);
    if (rc) {
        tv_budget_end();
        return rc;
    }
    return render(t, ctx, opts, &budget, out, out_len, err, err_cap);
}
