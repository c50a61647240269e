/* chat/tpl_eval.c: statement execution. Scoping follows jinja2: `if` shares its scope; each
 * iteration of a `for`, each macro call, `with` and the bodies of set/filter blocks get a
 * fresh child scope, so a `set` inside a loop is gone at the next iteration (use a namespace
 * to carry state, as templates do). Macros see the scope they were defined in (lexically) at
 * the time they are called. Statements return 0, -1 on error, or BREAK/CONTINUE. */
#include "chat/tpl_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

/* ---- errors, budget, buffers ---- */

int tpl_fail(struct tpl_render *r, int line, const char *fmt, ...) {
    if (r->failed) return -1;
    r->failed = 1;
    r->err_line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    return -1;
}

int tpl_limit(struct tpl_render *r, int line, const char *what) {
    if (!r->failed) r->limit = 1;
    return tpl_fail(r, line, "%s", what);
}

int tpl_oom(struct tpl_render *r, int line) {
    if (tv_take_too_deep()) return tpl_limit(r, line, "values nested too deeply");
    return tpl_limit(r, line, "out of memory (the template exceeded its memory limit)");
}

int tpl_step(struct tpl_render *r, int line, uint64_t n) {
    r->steps += n;
    if (r->steps > r->max_steps)
        return tpl_limit(r, line, "the template ran too long (step limit)");
    return 0;
}

int tpl_buf_put(struct tpl_render *r, struct tpl_buf *b, const char *s, size_t n) {
    if (!n) return 0;
    if (n > r->max_output || b->n > r->max_output - n)
        return tpl_limit(r, 0, "the template output is too large");
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = tv_realloc(b->p, b->cap, cap);
        if (!p) return tpl_oom(r, 0);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

void tpl_buf_free(struct tpl_buf *b) {
    tv_free(b->p, b->cap);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ---- scopes ---- */

struct tpl_scope *tpl_scope_new(struct tpl_scope *parent) {
    struct tpl_scope *s = tv_alloc(sizeof *s);
    if (!s) return NULL;
    memset(s, 0, sizeof *s);
    s->rc = 1;
    s->parent = parent;
    if (parent) parent->rc++;
    return s;
}

void tpl_scope_release(struct tpl_scope *s) {
    while (s && --s->rc == 0) {
        struct tpl_scope *parent = s->parent;
        for (size_t i = 0; i < s->n; i++) tv_drop(&s->vals[i]);
        tv_free(s->names, s->cap * sizeof *s->names);
        tv_free(s->vals, s->cap * sizeof *s->vals);
        tv_free(s, sizeof *s);
        s = parent;
    }
}

int tpl_scope_set(struct tpl_render *r, struct tpl_scope *s, const char *name, struct tv v) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) {
            tv_drop(&s->vals[i]);
            s->vals[i] = v;
            return 0;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4;
        const char **nn = tv_realloc(s->names, s->cap * sizeof *nn, cap * sizeof *nn);
        if (nn) s->names = nn;
        struct tv *nv = nn ? tv_realloc(s->vals, s->cap * sizeof *nv, cap * sizeof *nv) : NULL;
        if (!nv) {
            if (nn) s->names = tv_realloc(nn, cap * sizeof *nn, s->cap * sizeof *nn);
            tv_drop(&v);
            return tpl_oom(r, 0);
        }
        s->vals = nv;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
    return 0;
}

const struct tv *tpl_scope_find(struct tpl_render *r, struct tpl_scope *s, const char *name) {
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (!strcmp(s->names[i], name)) return &s->vals[i];
    if (r->ctx.t == TV_DICT) return tv_dict_get_str(r->ctx.u.d, name, strlen(name));
    return NULL;
}

/* Keeps a reference to a macro or namespace until the render ends (they can form cycles). */
int tpl_keep(struct tpl_render *r, const struct tv *v) {
    if (r->keep.t != TV_LIST && tv_list_new(TL_LIST, 16, &r->keep)) return tpl_oom(r, 0);
    return tv_list_push(&r->keep, tv_ref(*v)) ? tpl_oom(r, 0) : 0;
}

/* ---- assignment ---- */

static int assign(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *target,
                  struct tv v) {
    if (target->kind == ND_NAME) return tpl_scope_set(r, s, target->name, v);
    if (target->kind == ND_GETATTR) { /* ns.attr */
        const struct tv *ns = tpl_scope_find(r, s, target->a->name);
        if (!ns || ns->t != TV_DICT || ns->u.d->kind != TD_NS) {
            tv_drop(&v);
            return tpl_fail(r, target->line, "can not assign attribute on non-namespace object");
        }
        struct tv key, nsv = *ns;
        if (tv_str_new(target->name, target->name_len, &key)) {
            tv_drop(&v);
            return tpl_oom(r, target->line);
        }
        return tv_dict_set(&nsv, key, v, NULL) ? tpl_oom(r, target->line) : 0;
    }
    /* tuple unpacking */
    struct tv items;
    int rc = tpl_iter_list(r, target->line, &v, &items);
    tv_drop(&v);
    if (rc) return -1;
    if (items.u.l->n != target->n_items) {
        size_t n = items.u.l->n;
        tv_drop(&items);
        return tpl_fail(r, target->line,
                        n > target->n_items ? "too many values to unpack (expected %zu)"
                                            : "not enough values to unpack (expected %zu)",
                        target->n_items);
    }
    for (size_t i = 0; i < target->n_items && !rc; i++)
        rc = tpl_scope_set(r, s, target->items[i]->name, tv_ref(items.u.l->v[i]));
    tv_drop(&items);
    return rc;
}

/* ---- statements ---- */

static int print_value(struct tpl_render *r, const struct tv *v, struct tpl_buf *out) {
    if (v->t == TV_STR) return tpl_buf_put(r, out, v->u.s->s, v->u.s->len);
    return tpl_to_str(r, v, out);
}

/* Renders body in a child scope and returns the text as a string value. */
static int capture(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *body,
                   struct tv *out) {
    struct tpl_scope *inner = tpl_scope_new(s);
    if (!inner) return tpl_oom(r, body->line);
    struct tpl_buf b = {0};
    int rc = tpl_exec(r, inner, body, &b);
    tpl_scope_release(inner);
    if (rc == 0 && tv_str_new(b.p ? b.p : "", b.n, out)) rc = tpl_oom(r, body->line);
    tpl_buf_free(&b);
    return rc ? -1 : 0;
}

/* Applies a filter chain whose innermost input is ND_INPUT to v (consumed). */
static int apply_filters(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *chain,
                         struct tv *v) {
    struct tv res;
    int rc = tpl_eval_with_input(r, s, chain, v, &res);
    tv_drop(v);
    if (rc) return -1;
    *v = res;
    return 0;
}

static int exec_for(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
                    struct tpl_buf *out) {
    struct tv it, items;
    if (tpl_eval(r, s, n->b, &it)) return -1;
    int rc = tpl_iter_list(r, n->line, &it, &items);
    tv_drop(&it);
    if (rc) return -1;
    if (n->e) { /* for x in y if cond: filter first, so loop.length/last see the result */
        struct tv kept;
        if (tv_list_new(TL_LIST, items.u.l->n, &kept)) {
            tv_drop(&items);
            return tpl_oom(r, n->line);
        }
        for (size_t i = 0; i < items.u.l->n && !rc; i++) {
            struct tpl_scope *t = tpl_scope_new(s);
            struct tv c = {0};
            rc = !t ? tpl_oom(r, n->line) : assign(r, t, n->a, tv_ref(items.u.l->v[i]));
            if (!rc) rc = tpl_eval(r, t, n->e, &c);
            if (!rc && tv_truthy(&c) && tv_list_push(&kept, tv_ref(items.u.l->v[i])))
                rc = tpl_oom(r, n->line);
            tv_drop(&c);
            tpl_scope_release(t);
        }
        tv_drop(&items);
        if (rc) {
            tv_drop(&kept);
            return -1;
        }
        items = kept;
    }
    if (items.u.l->n == 0) {
        tv_drop(&items);
        if (!n->d) return 0;
        struct tpl_scope *t = tpl_scope_new(s);
        if (!t) return tpl_oom(r, n->line);
        rc = tpl_exec(r, t, n->d, out);
        tpl_scope_release(t);
        return rc;
    }
    struct tv_loop *lp = tv_alloc(sizeof *lp);
    if (!lp) {
        tv_drop(&items);
        return tpl_oom(r, n->line);
    }
    memset(lp, 0, sizeof *lp);
    lp->rc = 1;
    lp->items = items;
    lp->depth = 1;
    struct tv loopv = {.t = TV_LOOP};
    loopv.u.loop = lp;
    rc = 0;
    for (size_t i = 0; i < items.u.l->n; i++) {
        lp->i = i;
        struct tpl_scope *t = tpl_scope_new(s);
        if (!t) {
            rc = tpl_oom(r, n->line);
            break;
        }
        rc = assign(r, t, n->a, tv_ref(items.u.l->v[i]));
        if (!rc) rc = tpl_scope_set(r, t, "loop", tv_ref(loopv));
        if (!rc) rc = tpl_exec(r, t, n->c, out);
        tpl_scope_release(t);
        if (rc == FLOW_CONTINUE) rc = 0;
        if (rc) break;
    }
    tv_drop(&loopv);
    return rc == FLOW_BREAK ? 0 : rc;
}

static int exec_macro_def(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n) {
    struct tv f;
    if (tpl_func_new(r, FN_MACRO, n->name, &f)) return -1;
    f.u.fn->node = n;
    f.u.fn->flags = n->flags;
    f.u.fn->closure = s;
    s->rc++;
    if (tpl_keep(r, &f)) {
        tv_drop(&f);
        return -1;
    }
    return tpl_scope_set(r, s, n->name, f);
}

static int exec_call_block(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
                           struct tpl_buf *out) {
    struct tv caller, fn, res = {0};
    if (tpl_func_new(r, FN_MACRO, "caller", &caller)) return -1;
    caller.u.fn->node = n;
    caller.u.fn->flags = n->flags;
    caller.u.fn->closure = s;
    s->rc++;
    if (tpl_keep(r, &caller)) {
        tv_drop(&caller);
        return -1;
    }
    const struct tpl_node *call = n->a;
    struct tpl_args a = {0};
    int rc = tpl_eval(r, s, call->a, &fn);
    if (!rc) rc = tpl_eval_args(r, s, call, &a);
    if (!rc) {
        if (fn.t == TV_FUNC && fn.u.fn->kind == FN_MACRO)
            rc = tpl_call_macro(r, n->line, fn.u.fn, &a, &caller, &res);
        else
            rc = tpl_fail(r, n->line, "a call block needs a macro to call");
    }
    if (!rc) rc = print_value(r, &res, out);
    tv_drop(&res);
    tpl_args_free(&a);
    tv_drop(&fn);
    tv_drop(&caller);
    return rc;
}

static int exec_node(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
                     struct tpl_buf *out);

/* Bounds the C recursion of statements, expressions and macro calls together, so that no
 * template can exhaust the stack. */
int tpl_exec(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
             struct tpl_buf *out) {
    if (++r->nest > TPL_MAX_NEST) {
        r->nest--;
        return tpl_limit(r, n->line,
                         "the template nests too deeply (expressions, blocks and macro calls)");
    }
    int rc = exec_node(r, s, n, out);
    r->nest--;
    return rc;
}

static int exec_node(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
                     struct tpl_buf *out) {
    if (tpl_step(r, n->line, 1)) return -1;
    int rc = 0;
    struct tv v = {0};
    switch (n->kind) {
    case ND_BODY:
        for (size_t i = 0; i < n->n_items; i++)
            if ((rc = tpl_exec(r, s, n->items[i], out))) return rc;
        return 0;
    case ND_DATA:
        return tpl_buf_put(r, out, n->value.u.s->s, n->value.u.s->len);
    case ND_PRINT:
        if (tpl_eval(r, s, n->a, &v)) return -1;
        rc = print_value(r, &v, out);
        tv_drop(&v);
        return rc;
    case ND_IF:
        if (tpl_eval(r, s, n->a, &v)) return -1;
        rc = tv_truthy(&v);
        tv_drop(&v);
        if (rc) return tpl_exec(r, s, n->b, out);
        return n->c ? tpl_exec(r, s, n->c, out) : 0;
    case ND_FOR:
        return exec_for(r, s, n, out);
    case ND_SET:
        if (tpl_eval(r, s, n->b, &v)) return -1;
        return assign(r, s, n->a, v);
    case ND_SET_BLOCK:
        if (capture(r, s, n->b, &v)) return -1;
        if (n->c && apply_filters(r, s, n->c, &v)) return -1;
        return assign(r, s, n->a, v);
    case ND_FILTER_BLOCK:
        if (capture(r, s, n->b, &v) || apply_filters(r, s, n->a, &v)) return -1;
        rc = print_value(r, &v, out);
        tv_drop(&v);
        return rc;
    case ND_MACRO:
        return exec_macro_def(r, s, n);
    case ND_CALL_BLOCK:
        return exec_call_block(r, s, n, out);
    case ND_WITH: {
        struct tpl_scope *t = tpl_scope_new(s);
        if (!t) return tpl_oom(r, n->line);
        for (size_t i = 0; i < n->n_items && !rc; i++) {
            rc = tpl_eval(r, s, n->items2[i], &v);
            if (!rc) rc = assign(r, t, n->items[i], v);
        }
        if (!rc) rc = tpl_exec(r, t, n->b, out);
        tpl_scope_release(t);
        return rc;
    }
    case ND_BREAK:
        return FLOW_BREAK;
    case ND_CONTINUE:
        return FLOW_CONTINUE;
    default:
        return tpl_fail(r, n->line, "internal error: statement kind %d", n->kind);
    }
}
