/* chat/tpl_call.c: calls. Arguments are evaluated into struct tpl_args; a macro binds them
 * as jinja2's Macro.__call__ does (positional, then by name, then defaults evaluated in the
 * macro's scope; missing ones are undefined; extras go to varargs/kwargs when the body uses
 * them, else they are an error). Also the global functions chat templates call: range
 * (at most 100000 items, as the sandbox allows), namespace, dict, raise_exception and
 * strftime_now. */
#include "chat/tpl_impl.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* ---- function objects ---- */

int32_t *tpl_func_rc(struct tv_func *f) {
    return &f->rc;
}

unsigned tpl_func_depth(const struct tv_func *f) {
    return f->kind == FN_METHOD ? tv_depth(&f->self) + 1 : 0;
}

void tpl_func_release(struct tv_func *f) {
    if (f->rc < 0 || --f->rc > 0) return;
    tv_drop(&f->self);
    tpl_scope_release(f->closure);
    tv_free(f, sizeof *f);
}

int tpl_func_new(struct tpl_render *r, enum tpl_fn_kind kind, const char *name, struct tv *out) {
    struct tv_func *f = tv_alloc(sizeof *f);
    if (!f) return tpl_oom(r, 0);
    memset(f, 0, sizeof *f);
    f->rc = 1;
    f->kind = (uint8_t)kind;
    f->name = name;
    out->t = TV_FUNC;
    out->u.fn = f;
    return 0;
}

/* ---- arguments ---- */

const struct tv *tpl_arg(const struct tpl_args *a, size_t i, const char *name) {
    if (i < a->n) return &a->pos[i];
    for (size_t k = 0; name && k < a->n_kw; k++)
        if (!strcmp(a->kw[k], name)) return &a->kwv[k];
    return NULL;
}

int tpl_args_check(struct tpl_render *r, int line, const struct tpl_args *a, const char *what,
                   const char *const *names, size_t n_names) {
    if (a->n > n_names)
        return tpl_fail(r, line, "%s takes at most %zu arguments (%zu given)", what, n_names, a->n);
    for (size_t k = 0; k < a->n_kw; k++) {
        size_t j = 0;
        while (j < n_names && strcmp(names[j], a->kw[k])) j++;
        if (j == n_names)
            return tpl_fail(r, line, "%s got an unexpected keyword argument '%s'", what, a->kw[k]);
        if (j < a->n)
            return tpl_fail(r, line, "%s got multiple values for argument '%s'", what, a->kw[k]);
    }
    return 0;
}

void tpl_args_free(struct tpl_args *a) {
    for (size_t i = 0; i < a->n; i++) tv_drop(&a->pos[i]);
    for (size_t i = 0; i < a->n_kw; i++) tv_drop(&a->kwv[i]);
    tv_free(a->pos, a->cap_pos * sizeof *a->pos);
    tv_free(a->kw, a->cap_kw * sizeof *a->kw);
    tv_free(a->kwv, a->cap_kw * sizeof *a->kwv);
    memset(a, 0, sizeof *a);
}

int tpl_eval_args(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *call,
                  struct tpl_args *out) {
    struct tv dyn = {0}, dynkw = {0};
    memset(out, 0, sizeof *out);
    if (call->dyn_args) {
        struct tv v;
        if (tpl_eval(r, s, call->dyn_args, &v)) return -1;
        int rc = tpl_iter_list(r, call->line, &v, &dyn);
        tv_drop(&v);
        if (rc) return -1;
    }
    if (call->dyn_kwargs) {
        if (tpl_eval(r, s, call->dyn_kwargs, &dynkw)) return tv_drop(&dyn), -1;
        if (dynkw.t != TV_DICT || dynkw.u.d->kind != TD_DICT) {
            tv_drop(&dyn);
            tv_drop(&dynkw);
            return tpl_fail(r, call->line, "argument after ** must be a mapping");
        }
    }
    size_t n_dyn = dyn.t == TV_LIST ? dyn.u.l->n : 0, n_dkw = dynkw.t == TV_DICT ? dynkw.u.d->n : 0;
    int rc = 0;
    out->cap_pos = call->n_items + n_dyn;
    out->cap_kw = call->n_kw + n_dkw;
    out->pos = tv_alloc(out->cap_pos * sizeof *out->pos);
    out->kw = tv_alloc(out->cap_kw * sizeof *out->kw);
    out->kwv = tv_alloc(out->cap_kw * sizeof *out->kwv);
    if (!out->pos || !out->kw || !out->kwv) rc = tpl_oom(r, call->line);
    for (size_t i = 0; i < call->n_items && !rc; i++) {
        rc = tpl_eval(r, s, call->items[i], &out->pos[out->n]);
        if (!rc) out->n++;
    }
    for (size_t i = 0; i < n_dyn && !rc; i++) out->pos[out->n++] = tv_ref(dyn.u.l->v[i]);
    for (size_t i = 0; i < call->n_kw && !rc; i++) {
        rc = tpl_eval(r, s, call->kw_vals[i], &out->kwv[out->n_kw]);
        if (!rc) out->kw[out->n_kw++] = call->kw_names[i];
    }
    for (size_t i = 0; i < n_dkw && !rc; i++) {
        const struct tv *k = &dynkw.u.d->k[i];
        if (k->t != TV_STR) {
            rc = tpl_fail(r, call->line, "keywords must be strings");
            break;
        }
        out->kw[out->n_kw] = k->u.s->s; /* the dict is kept alive until the render ends */
        out->kwv[out->n_kw++] = tv_ref(dynkw.u.d->v[i]);
    }
    if (!rc && n_dkw) rc = tpl_keep(r, &dynkw);
    tv_drop(&dyn);
    tv_drop(&dynkw);
    return rc;
}

/* ---- macros ---- */

int tpl_call_macro(struct tpl_render *r, int line, struct tv_func *fn, struct tpl_args *a,
                   const struct tv *caller, struct tv *out) {
    const struct tpl_node *m = fn->node;
    const char *name = m->kind == ND_MACRO ? m->name : "caller";
    size_t np = m->n_items;
    if (r->depth >= r->max_depth)
        return tpl_limit(r, line, "maximum recursion depth exceeded in a macro call");
    int uses_varargs = fn->flags & TPL_USES_VARARGS, uses_kwargs = fn->flags & TPL_USES_KWARGS;
    if (a->n > np && !uses_varargs)
        return tpl_fail(r, line, "macro '%s' takes not more than %zu argument(s)", name, np);
    struct tpl_scope *s = tpl_scope_new(fn->closure);
    if (!s) return tpl_oom(r, line);
    struct tv kwargs = {0}, varargs = {0};
    int rc = 0;
    unsigned char *used = tv_alloc(a->n_kw + 1);
    if (!used)
        rc = tpl_oom(r, line);
    else
        memset(used, 0, a->n_kw + 1);
    if (!rc && !caller && (fn->flags & TPL_USES_CALLER)) /* caller=... given by name */
        for (size_t k = 0; k < a->n_kw; k++)
            if (!strcmp(a->kw[k], "caller")) {
                caller = &a->kwv[k];
                used[k] = 1;
            }
    for (size_t i = 0; i < np && !rc; i++) {
        const char *pname = m->items[i]->name;
        if (i < a->n) {
            rc = tpl_scope_set(r, s, pname, tv_ref(a->pos[i]));
            continue;
        }
        size_t k = 0;
        while (k < a->n_kw && strcmp(a->kw[k], pname)) k++;
        if (k < a->n_kw) {
            used[k] = 1;
            rc = tpl_scope_set(r, s, pname, tv_ref(a->kwv[k]));
        } else if (m->items2[i]) {
            struct tv d;
            rc = tpl_eval(r, s, m->items2[i], &d);
            if (!rc) rc = tpl_scope_set(r, s, pname, d);
        } else {
            rc = tpl_scope_set(r, s, pname, tv_undef(pname));
        }
    }
    if (!rc && (fn->flags & TPL_USES_CALLER))
        rc = tpl_scope_set(r, s, "caller", caller ? tv_ref(*caller) : tv_undef("caller"));
    else if (!rc && caller)
        rc = tpl_fail(r, line, "macro '%s' was called with a caller it does not use", name);
    for (size_t k = 0; k < a->n_kw && !rc; k++) {
        if (used[k]) continue;
        if (!uses_kwargs) {
            rc = tpl_fail(r, line, "macro '%s' takes no keyword argument '%s'", name, a->kw[k]);
            break;
        }
        struct tv key;
        if (kwargs.t != TV_DICT && tv_dict_new(TD_DICT, 4, &kwargs))
            rc = tpl_oom(r, line);
        else if (tv_str_c(a->kw[k], &key) || tv_dict_set(&kwargs, key, tv_ref(a->kwv[k]), NULL))
            rc = tpl_oom(r, line);
    }
    if (!rc && uses_kwargs) {
        if (kwargs.t != TV_DICT && tv_dict_new(TD_DICT, 0, &kwargs))
            rc = tpl_oom(r, line);
        else {
            rc = tpl_scope_set(r, s, "kwargs", kwargs);
            kwargs.t = TV_UNDEF;
        }
    }
    if (!rc && uses_varargs) {
        if (tv_list_new(TL_TUPLE, 0, &varargs)) rc = tpl_oom(r, line);
        for (size_t i = np; i < a->n && !rc; i++)
            if (tv_list_push(&varargs, tv_ref(a->pos[i]))) rc = tpl_oom(r, line);
        if (!rc) {
            rc = tpl_scope_set(r, s, "varargs", varargs);
            varargs.t = TV_UNDEF;
        }
    }
    tv_drop(&kwargs);
    tv_drop(&varargs);
    tv_free(used, a->n_kw + 1);
    struct tpl_buf b = {0};
    if (!rc) {
        r->depth++;
        rc = tpl_exec(r, s, m->b, &b);
        r->depth--;
        if (rc > 0) rc = 0;
    }
    tpl_scope_release(s);
    if (!rc && tv_str_new(b.p ? b.p : "", b.n, out)) rc = tpl_oom(r, line);
    tpl_buf_free(&b);
    return rc;
}

int tpl_call_value(struct tpl_render *r, int line, const struct tv *fn, struct tpl_args *a,
                   struct tv *out) {
    if (fn->t == TV_UNDEF) return tpl_undefined_error(r, line, fn);
    if (fn->t != TV_FUNC)
        return tpl_fail(r, line, "'%s' object is not callable", tpl_type_name(fn));
    struct tv_func *f = fn->u.fn;
    if (f->kind == FN_MACRO) return tpl_call_macro(r, line, f, a, NULL, out);
    if (f->kind == FN_METHOD) return tpl_method(r, line, &f->self, f->name, a, out);
    return tpl_builtin(r, line, f->name, a, out);
}

/* ---- globals ---- */

static const char *const BUILTINS[] = {"range",        "namespace", "dict",   "raise_exception",
                                       "strftime_now", "cycler",    "joiner", "lipsum"};

const char *tpl_builtin_name(const char *name) {
    for (size_t i = 0; i < sizeof BUILTINS / sizeof *BUILTINS; i++)
        if (!strcmp(BUILTINS[i], name)) return BUILTINS[i];
    return NULL;
}

int tpl_is_builtin(const char *name) {
    return tpl_builtin_name(name) != NULL;
}

/* dict(mapping_or_pairs, **kw) into out (a dict or namespace). */
static int fill_dict(struct tpl_render *r, int line, struct tpl_args *a, struct tv *out) {
    if (a->n > 1) return tpl_fail(r, line, "expected at most 1 positional argument, got %zu", a->n);
    if (a->n == 1) {
        const struct tv *src = &a->pos[0];
        if (src->t == TV_DICT && src->u.d->kind == TD_DICT) {
            for (size_t i = 0; i < src->u.d->n; i++)
                if (tv_dict_set(out, tv_ref(src->u.d->k[i]), tv_ref(src->u.d->v[i]), NULL))
                    return tpl_oom(r, line);
        } else {
            struct tv items;
            if (tpl_iter_list(r, line, src, &items)) return -1;
            for (size_t i = 0; i < items.u.l->n; i++) {
                const struct tv *p = &items.u.l->v[i];
                if (p->t != TV_LIST || p->u.l->n != 2) {
                    tv_drop(&items);
                    return tpl_fail(
                        r, line, "dictionary update sequence element #%zu has the wrong length", i);
                }
                int bad;
                if (tv_dict_set(out, tv_ref(p->u.l->v[0]), tv_ref(p->u.l->v[1]), &bad)) {
                    tv_drop(&items);
                    return bad ? tpl_fail(r, line, "unhashable type") : tpl_oom(r, line);
                }
            }
            tv_drop(&items);
        }
    }
    for (size_t k = 0; k < a->n_kw; k++) {
        struct tv key;
        if (tv_str_c(a->kw[k], &key) || tv_dict_set(out, key, tv_ref(a->kwv[k]), NULL))
            return tpl_oom(r, line);
    }
    if (tv_depth(out) > TV_MAX_DEPTH) return tpl_fail(r, line, "values nested too deeply");
    return 0;
}

static int builtin_range(struct tpl_render *r, int line, struct tpl_args *a, struct tv *out) {
    int64_t v[3] = {0, 0, 1};
    if (a->n_kw) return tpl_fail(r, line, "range() takes no keyword arguments");
    if (a->n < 1 || a->n > 3)
        return tpl_fail(r, line, "range expected 1 to 3 arguments, got %zu", a->n);
    for (size_t i = 0; i < a->n; i++) {
        if (a->pos[i].t != TV_INT && a->pos[i].t != TV_BOOL)
            return tpl_fail(r, line, "'%s' object cannot be interpreted as an integer",
                            tpl_type_name(&a->pos[i]));
        v[a->n == 1 ? 1 : i] = a->pos[i].u.i;
    }
    if (v[2] == 0) return tpl_fail(r, line, "range() arg 3 must not be zero");
    __int128 count = v[2] > 0 ? ((__int128)v[1] - v[0] + v[2] - 1) / v[2]
                              : ((__int128)v[0] - v[1] - v[2] - 1) / -v[2];
    if (count < 0) count = 0;
    if (count > 100000) return tpl_fail(r, line, "range too big, the limit is 100000 items");
    if (tpl_step(r, line, (uint64_t)count) || tv_list_new(TL_RANGE, (size_t)count, out))
        return r->failed ? -1 : tpl_oom(r, line);
    memcpy(out->u.l->range, v, sizeof v);
    for (int64_t i = 0; i < (int64_t)count; i++)
        if (tv_list_push(out, tv_int(v[0] + i * v[2]))) return tv_drop(out), tpl_oom(r, line);
    return 0;
}

int tpl_builtin(struct tpl_render *r, int line, const char *name, struct tpl_args *a,
                struct tv *out) {
    if (!strcmp(name, "range")) return builtin_range(r, line, a, out);
    if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
        int ns = name[0] == 'n';
        if (tv_dict_new(ns ? TD_NS : TD_DICT, 4, out)) return tpl_oom(r, line);
        if (fill_dict(r, line, a, out) || (ns && tpl_keep(r, out))) return tv_drop(out), -1;
        return 0;
    }
    if (!strcmp(name, "raise_exception")) {
        const struct tv *msg = tpl_arg(a, 0, "message");
        struct tpl_buf b = {0};
        if (msg && tpl_to_str(r, msg, &b)) return tpl_buf_free(&b), -1;
        tpl_fail(r, line, "%s", b.p ? b.p : "");
        r->raised = 1;
        tpl_buf_free(&b);
        return -1;
    }
    if (!strcmp(name, "strftime_now")) {
        const struct tv *fmt = tpl_arg(a, 0, "format");
        if (!fmt || fmt->t != TV_STR)
            return tpl_fail(r, line, "strftime_now() needs a format string");
        struct tm tm;
        time_t now = r->now;
        if (!localtime_r(&now, &tm)) return tpl_fail(r, line, "strftime_now(): bad time");
        char buf[512];
        size_t n = fmt->u.s->len ? strftime(buf, sizeof buf, fmt->u.s->s, &tm) : 0;
        if (fmt->u.s->len && n == 0) return tpl_fail(r, line, "strftime_now(): format too long");
        return tv_str_new(buf, n, out) ? tpl_oom(r, line) : 0;
    }
    return tpl_fail(r, line, "the global function '%s' is not supported", name);
}
