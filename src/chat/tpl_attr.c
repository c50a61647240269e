/* chat/tpl_attr.c: attribute access, subscripts, slices and iteration as jinja2's immutable
 * sandbox does them. `x.name` tries the Python attribute first (a dict's get/items/keys/values,
 * a string's methods, a loop's index/first/...), then the item; `x[key]` tries the item first,
 * then the attribute. A miss gives undefined; a miss on undefined itself is an error. Methods
 * that would modify a list or dict are not reachable, as in the sandbox. */
#include "chat/tpl_impl.h"

#include <string.h>

/* ---- loop object ---- */

int32_t *tpl_loop_rc(struct tv_loop *l) {
    return &l->rc;
}

void tpl_loop_release(struct tv_loop *l) {
    if (l->rc < 0 || --l->rc > 0) return;
    tv_drop(&l->items);
    tv_drop(&l->changed);
    tv_free(l, sizeof *l);
}

int64_t tpl_loop_length(const struct tv_loop *l) {
    return (int64_t)l->items.u.l->n;
}

unsigned tpl_loop_depth(const struct tv_loop *l) {
    unsigned a = l->items.u.l->depth, b = tv_depth(&l->changed);
    return (a > b ? a : b) + 1;
}

static int loop_attr(struct tpl_render *r, int line, const struct tv *obj, const char *name,
                     struct tv *out) {
    const struct tv_loop *l = obj->u.loop;
    int64_t i = (int64_t)l->i, n = (int64_t)l->items.u.l->n;
    if (!strcmp(name, "index"))
        *out = tv_int(i + 1);
    else if (!strcmp(name, "index0"))
        *out = tv_int(i);
    else if (!strcmp(name, "revindex"))
        *out = tv_int(n - i);
    else if (!strcmp(name, "revindex0"))
        *out = tv_int(n - i - 1);
    else if (!strcmp(name, "first"))
        *out = tv_bool(i == 0);
    else if (!strcmp(name, "last"))
        *out = tv_bool(i == n - 1);
    else if (!strcmp(name, "length"))
        *out = tv_int(n);
    else if (!strcmp(name, "depth"))
        *out = tv_int(l->depth);
    else if (!strcmp(name, "depth0"))
        *out = tv_int(l->depth - 1);
    else if (!strcmp(name, "previtem"))
        *out = i > 0 ? tv_ref(l->items.u.l->v[i - 1]) : tv_undef("there is no previous item");
    else if (!strcmp(name, "nextitem"))
        *out = i + 1 < n ? tv_ref(l->items.u.l->v[i + 1]) : tv_undef("there is no next item");
    else if (!strcmp(name, "cycle") || !strcmp(name, "changed")) {
        if (tpl_func_new(r, FN_METHOD, !strcmp(name, "cycle") ? "cycle" : "changed", out))
            return -1;
        out->u.fn->self = tv_ref(*obj);
    } else
        *out = tv_undef(NULL);
    (void)line;
    return 0;
}

/* ---- attributes and items ---- */

int tpl_getattr(struct tpl_render *r, int line, const struct tv *obj, const char *name,
                struct tv *out) {
    switch (obj->t) {
    case TV_UNDEF:
        return tpl_undefined_error(r, line, obj);
    case TV_LOOP:
        return loop_attr(r, line, obj, name, out);
    case TV_DICT: {
        if (obj->u.d->kind == TD_DICT && tpl_has_method(obj, name)) break;
        const struct tv *v = tv_dict_get_str(obj->u.d, name, strlen(name));
        *out = v ? tv_ref(*v) : tv_undef(name);
        return 0;
    }
    case TV_STR:
    case TV_LIST:
        if (tpl_has_method(obj, name)) break;
        *out = tv_undef(name);
        return 0;
    default:
        *out = tv_undef(name);
        return 0;
    }
    if (tpl_func_new(r, FN_METHOD, tpl_method_name(obj, name), out)) return -1;
    out->u.fn->self = tv_ref(*obj);
    return 0;
}

static int seq_index(const struct tv *key, int64_t n, int64_t *idx) {
    if (key->t != TV_INT && key->t != TV_BOOL) return 0;
    int64_t i = key->u.i;
    if (i < 0) i += n;
    if (i < 0 || i >= n) return 0;
    *idx = i;
    return 1;
}

int tpl_getitem(struct tpl_render *r, int line, const struct tv *obj, const struct tv *key,
                struct tv *out) {
    int64_t i;
    switch (obj->t) {
    case TV_UNDEF:
        return tpl_undefined_error(r, line, obj);
    case TV_STR:
        if (seq_index(key, (int64_t)obj->u.s->n_cp, &i)) {
            size_t a = tpl_utf8_offset(obj->u.s, (size_t)i), b = a;
            tpl_utf8_next(obj->u.s->s, &b);
            return tv_str_new(obj->u.s->s + a, b - a, out) ? tpl_oom(r, line) : 0;
        }
        break;
    case TV_LIST: /* dict views and generators are not subscriptable */
        if ((obj->u.l->kind == TL_LIST || obj->u.l->kind == TL_TUPLE ||
             obj->u.l->kind == TL_RANGE) &&
            seq_index(key, (int64_t)obj->u.l->n, &i)) {
            *out = tv_ref(obj->u.l->v[i]);
            return 0;
        }
        break;
    case TV_DICT:
        if (obj->u.d->kind == TD_DICT) {
            const struct tv *v = tv_dict_get(obj->u.d, key);
            if (v) {
                *out = tv_ref(*v);
                return 0;
            }
        }
        break;
    default:
        break;
    }
    if (key->t == TV_STR &&
        (obj->t != TV_DICT || obj->u.d->kind == TD_NS || tpl_has_method(obj, key->u.s->s))) {
        if (tpl_getattr(r, line, obj, key->u.s->s, out)) return -1;
        if (out->t == TV_UNDEF) out->u.hint = NULL; /* the key's text does not outlive it */
        return 0;
    }
    *out = tv_undef(NULL);
    return 0;
}

/* Python slice indices: clamps start/stop for a sequence of n items. */
static int slice_bounds(const struct tv *b, int64_t n, int64_t *start, int64_t *stop,
                        int64_t *step) {
    for (int k = 0; k < 3; k++)
        if (b[k].t != TV_NONE && b[k].t != TV_INT && b[k].t != TV_BOOL) return -1;
    *step = b[2].t == TV_NONE ? 1 : b[2].u.i;
    if (*step == 0) return -2;
    int64_t lo = *step < 0 ? -1 : 0, hi = *step < 0 ? n - 1 : n;
    if (b[0].t == TV_NONE)
        *start = *step < 0 ? hi : lo;
    else {
        *start = b[0].u.i < 0 ? b[0].u.i + n : b[0].u.i;
        if (*start < lo) *start = lo;
        if (*start > hi) *start = hi;
    }
    if (b[1].t == TV_NONE)
        *stop = *step < 0 ? lo : hi;
    else {
        *stop = b[1].u.i < 0 ? b[1].u.i + n : b[1].u.i;
        if (*stop < lo) *stop = lo;
        if (*stop > hi) *stop = hi;
    }
    return 0;
}

int tpl_slice(struct tpl_render *r, int line, const struct tv *obj, const struct tv *b,
              struct tv *out) {
    if (obj->t == TV_UNDEF) return tpl_undefined_error(r, line, obj);
    int is_str = obj->t == TV_STR;
    /* jinja2 slices with Python's own subscript (not the sandbox's getitem): errors raise */
    if (!is_str &&
        !(obj->t == TV_LIST &&
          (obj->u.l->kind == TL_LIST || obj->u.l->kind == TL_TUPLE || obj->u.l->kind == TL_RANGE)))
        return tpl_fail(r, line, "'%s' object is not subscriptable", tpl_type_name(obj));
    int64_t n = is_str ? (int64_t)obj->u.s->n_cp : (int64_t)obj->u.l->n, start, stop, step;
    int rc = slice_bounds(b, n, &start, &stop, &step);
    if (rc == -2) return tpl_fail(r, line, "slice step cannot be zero");
    if (rc) return tpl_fail(r, line, "slice indices must be integers or None");
    if (tpl_step(r, line, (uint64_t)n / 8)) return -1;
    if (is_str) {
        const struct tv_str *s = obj->u.s;
        if (step == 1) {
            if (stop < start) stop = start;
            size_t a = tpl_utf8_offset(s, (size_t)start), e = tpl_utf8_offset(s, (size_t)stop);
            return tv_str_new(s->s + a, e - a, out) ? tpl_oom(r, line) : 0;
        }
        struct tpl_buf buf = {0};
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            size_t a = tpl_utf8_offset(s, (size_t)i), e = a;
            tpl_utf8_next(s->s, &e);
            if (tpl_buf_put(r, &buf, s->s + a, e - a)) return tpl_buf_free(&buf), -1;
        }
        rc = tv_str_new(buf.p ? buf.p : "", buf.n, out) ? tpl_oom(r, line) : 0;
        tpl_buf_free(&buf);
        return rc;
    }
    const struct tv_list *l = obj->u.l;
    if (tv_list_new(l->kind == TL_TUPLE ? TL_TUPLE : TL_LIST, 0, out)) return tpl_oom(r, line);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        if (tv_list_push(out, tv_ref(l->v[i]))) return tv_drop(out), tpl_oom(r, line);
    return 0;
}

/* ---- iteration ---- */

int tpl_iter_list(struct tpl_render *r, int line, const struct tv *v, struct tv *out) {
    if (v->t == TV_LIST && v->u.l->err) return tpl_fail(r, line, "%s", v->u.l->err->s);
    switch (v->t) {
    case TV_UNDEF:
        return tv_list_new(TL_LIST, 0, out) ? tpl_oom(r, line) : 0;
    case TV_LIST:
        if (v->u.l->kind == TL_LIST || v->u.l->kind == TL_TUPLE) {
            *out = tv_ref(*v);
            return 0;
        }
        if (tv_list_new(TL_LIST, v->u.l->n, out)) return tpl_oom(r, line);
        for (size_t i = 0; i < v->u.l->n; i++)
            if (tv_list_push(out, tv_ref(v->u.l->v[i]))) return tv_drop(out), tpl_oom(r, line);
        return 0;
    case TV_DICT:
        if (v->u.d->kind == TD_NS) break;
        if (tv_list_new(TL_LIST, v->u.d->n, out)) return tpl_oom(r, line);
        for (size_t i = 0; i < v->u.d->n; i++)
            if (tv_list_push(out, tv_ref(v->u.d->k[i]))) return tv_drop(out), tpl_oom(r, line);
        return 0;
    case TV_STR: {
        const struct tv_str *s = v->u.s;
        if (tpl_step(r, line, s->n_cp / 8) || tv_list_new(TL_LIST, s->n_cp, out))
            return r->failed ? -1 : tpl_oom(r, line);
        for (size_t i = 0; i < s->len;) {
            size_t a = i;
            tpl_utf8_next(s->s, &i);
            struct tv c;
            if (tv_str_new(s->s + a, i - a, &c) || tv_list_push(out, c))
                return tv_drop(out), tpl_oom(r, line);
        }
        return 0;
    }
    case TV_LOOP:
        return tpl_iter_list(r, line, &v->u.loop->items, out);
    default:
        break;
    }
    return tpl_fail(r, line, "'%s' object is not iterable", tpl_type_name(v));
}
