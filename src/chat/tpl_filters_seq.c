/* chat/tpl_filters_seq.c: jinja2's filters over sequences and mappings: map, select, reject,
 * selectattr, rejectattr, unique, batch, slice and items return generators (always true,
 * without a length, as in Python); sort, dictsort, list and first/last return values.
 * Sorting is stable and, unless case_sensitive is set, compares strings lower-cased, as
 * jinja2's ignore_case does. Attribute paths ("a.b.0") look items up with getitem. */
#include "chat/tpl_impl.h"

#include "chat/tpl_filters.h"
#include "chat/tpl_pystr.h"

#include <string.h>

#define CHECK_ARGS(what, ...)                                                                      \
    do {                                                                                           \
        static const char *const names_[] = {__VA_ARGS__};                                         \
        if (tpl_args_check(r, line, a, what, names_, sizeof names_ / sizeof *names_)) return -1;   \
    } while (0)

/* ---- helpers ---- */

/* make_attrgetter: follows a dotted path (digits are indices); undefined steps give dflt. */
static int attr_get(struct tpl_render *r, int line, const struct tv *item, const struct tv *attr,
                    const struct tv *dflt, struct tv *out) {
    struct tv cur = tv_ref(*item);
    if (attr && attr->t == TV_STR) {
        const char *p = attr->u.s->s, *end = p + attr->u.s->len;
        while (1) {
            const char *dot = memchr(p, '.', (size_t)(end - p));
            size_t n = dot ? (size_t)(dot - p) : (size_t)(end - p);
            struct tv key, next;
            int digits = n > 0;
            for (size_t i = 0; i < n; i++) digits &= p[i] >= '0' && p[i] <= '9';
            if (digits && n < 18) {
                int64_t k = 0;
                for (size_t i = 0; i < n; i++) k = k * 10 + (p[i] - '0');
                key = tv_int(k);
            } else if (tv_str_new(p, n, &key)) {
                tv_drop(&cur);
                return tpl_oom(r, line);
            }
            int rc = tpl_getitem(r, line, &cur, &key, &next);
            tv_drop(&key);
            tv_drop(&cur);
            if (rc) return -1;
            cur = next;
            if (dflt && cur.t == TV_UNDEF) cur = tv_ref(*dflt);
            if (!dot) break;
            p = dot + 1;
        }
    } else if (attr && attr->t != TV_NONE) {
        struct tv next;
        int rc = tpl_getitem(r, line, &cur, attr, &next);
        tv_drop(&cur);
        if (rc) return -1;
        cur = next;
        if (dflt && cur.t == TV_UNDEF) cur = tv_ref(*dflt);
    }
    *out = cur;
    return 0;
}

static int lower_if_str(struct tpl_render *r, struct tv *v) {
    if (v->t != TV_STR) return 0;
    struct tv low;
    if (tpl_py_case(r, v->u.s, CASE_LOWER, &low)) return -1;
    tv_drop(v);
    *v = low;
    return 0;
}

/* Sort key of item: the attribute(s) (comma-separated for sort), lower-cased unless cs. */
static int sort_key(struct tpl_render *r, int line, const struct tv *item, const struct tv *attr,
                    int multi, int cs, struct tv *out) {
    if (multi && attr && attr->t == TV_STR && memchr(attr->u.s->s, ',', attr->u.s->len)) {
        if (tv_list_new(TL_LIST, 2, out)) return tpl_oom(r, line);
        const char *p = attr->u.s->s, *end = p + attr->u.s->len;
        while (1) {
            const char *comma = memchr(p, ',', (size_t)(end - p));
            size_t n = comma ? (size_t)(comma - p) : (size_t)(end - p);
            struct tv part, k;
            if (tv_str_new(p, n, &part)) return tv_drop(out), tpl_oom(r, line);
            int rc = attr_get(r, line, item, &part, NULL, &k);
            tv_drop(&part);
            if (rc || (!cs && lower_if_str(r, &k))) return tv_drop(out), -1;
            if (tv_list_push(out, k)) return tv_drop(out), tpl_oom(r, line);
            if (!comma) break;
            p = comma + 1;
        }
        return 0;
    }
    if (attr_get(r, line, item, attr, NULL, out)) return -1;
    return !cs && lower_if_str(r, out) ? (tv_drop(out), -1) : 0;
}

struct keyed {
    struct tv key;
    size_t idx;
};

enum { SORT_REVERSE = 1, SORT_EQ_FIRST = 2 };

/* Stable merge sort of k[0..n) by key; reverse keeps equal items in their order. With
 * SORT_EQ_FIRST keys compare as one-item lists do in Python (the sort filter's keys are
 * lists): equal keys are never ordered, so equal undefined attributes are not an error. */
static int merge_sort(struct tpl_render *r, int line, struct keyed *k, struct keyed *tmp, size_t n,
                      int flags) {
    if (n < 2) return 0;
    size_t h = n / 2;
    if (merge_sort(r, line, k, tmp, h, flags) || merge_sort(r, line, k + h, tmp, n - h, flags))
        return -1;
    size_t i = 0, j = h, o = 0;
    int reverse = flags & SORT_REVERSE;
    while (i < h && j < n) {
        int lt = 0;
        const struct tv *x = &k[i].key, *y = &k[j].key;
        if ((flags & SORT_EQ_FIRST) && tv_equal(x, y))
            lt = 0;
        else if (reverse ? tv_less(x, y, &lt) : tv_less(y, x, &lt))
            return tpl_fail(r, line, "'<' not supported between instances of '%s' and '%s'",
                            tpl_type_name(x), tpl_type_name(y));
        tmp[o++] = lt ? k[j++] : k[i++];
    }
    while (i < h) tmp[o++] = k[i++];
    while (j < n) tmp[o++] = k[j++];
    memcpy(k, tmp, n * sizeof *k);
    return tpl_step(r, line, n);
}

/* Sorts items (a list value) by their keys into a new list of kind `kind`. */
static int sorted_by(struct tpl_render *r, int line, const struct tv *items, struct keyed *k,
                     int flags, struct tv *out) {
    size_t n = items->u.l->n;
    struct keyed *tmp = tv_alloc((n + 1) * sizeof *tmp);
    if (!tmp) return tpl_oom(r, line);
    int rc = merge_sort(r, line, k, tmp, n, flags);
    tv_free(tmp, (n + 1) * sizeof *tmp);
    if (rc) return -1;
    if (tv_list_new(TL_LIST, n, out)) return tpl_oom(r, line);
    for (size_t i = 0; i < n; i++)
        if (tv_list_push(out, tv_ref(items->u.l->v[k[i].idx])))
            return tv_drop(out), tpl_oom(r, line);
    return 0;
}

static void free_keys(struct keyed *k, size_t n) {
    for (size_t i = 0; i < n; i++) tv_drop(&k[i].key);
    tv_free(k, (n + 1) * sizeof *k);
}

/* ---- filters ---- */

int tpl_f_sort(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
               struct tv *out) {
    CHECK_ARGS("sort", "reverse", "case_sensitive", "attribute");
    const struct tv *rev = tpl_arg(a, 0, "reverse"), *cs = tpl_arg(a, 1, "case_sensitive"),
                    *attr = tpl_arg(a, 2, "attribute");
    struct tv items;
    if (tpl_iter_list(r, line, v, &items)) return -1;
    size_t n = items.u.l->n;
    struct keyed *k = tv_alloc((n + 1) * sizeof *k);
    int rc = k ? 0 : tpl_oom(r, line);
    size_t done = 0;
    for (; done < n && !rc; done++) {
        k[done].idx = done;
        rc = sort_key(r, line, &items.u.l->v[done], attr, 1, cs && tv_truthy(cs), &k[done].key);
        if (rc) break;
    }
    if (!rc)
        rc = sorted_by(r, line, &items, k,
                       (rev && tv_truthy(rev) ? SORT_REVERSE : 0) | SORT_EQ_FIRST, out);
    if (k) free_keys(k, done);
    tv_drop(&items);
    return rc;
}

int tpl_f_dictsort(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                   struct tv *out) {
    CHECK_ARGS("dictsort", "case_sensitive", "by", "reverse");
    const struct tv *cs = tpl_arg(a, 0, "case_sensitive"), *by = tpl_arg(a, 1, "by"),
                    *rev = tpl_arg(a, 2, "reverse");
    int pos = 0;
    if (by && by->t == TV_STR && !strcmp(by->u.s->s, "value"))
        pos = 1;
    else if (by && !(by->t == TV_STR && !strcmp(by->u.s->s, "key")))
        return tpl_fail(r, line, "You can only sort by either \"key\" or \"value\"");
    if (v->t != TV_DICT || v->u.d->kind != TD_DICT)
        return tpl_fail(r, line, "dictsort needs a mapping, not %s", tpl_type_name(v));
    const struct tv_dict *d = v->u.d;
    struct tv pairs;
    if (tv_list_new(TL_LIST, d->n, &pairs)) return tpl_oom(r, line);
    struct keyed *k = tv_alloc((d->n + 1) * sizeof *k);
    int rc = k ? 0 : tpl_oom(r, line);
    size_t done = 0;
    for (; done < d->n && !rc; done++) {
        struct tv pair;
        if (tv_list_new(TL_TUPLE, 2, &pair) || tv_list_push(&pair, tv_ref(d->k[done])) ||
            tv_list_push(&pair, tv_ref(d->v[done])) || tv_list_push(&pairs, pair)) {
            rc = tpl_oom(r, line);
            break;
        }
        k[done].idx = done;
        k[done].key = tv_ref(pos ? d->v[done] : d->k[done]);
        if (!(cs && tv_truthy(cs))) rc = lower_if_str(r, &k[done].key);
    }
    if (!rc) rc = sorted_by(r, line, &pairs, k, rev && tv_truthy(rev) ? SORT_REVERSE : 0, out);
    if (k) free_keys(k, done);
    tv_drop(&pairs);
    return rc;
}

int tpl_f_unique(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                 struct tv *out) {
    CHECK_ARGS("unique", "case_sensitive", "attribute");
    const struct tv *cs = tpl_arg(a, 0, "case_sensitive"), *attr = tpl_arg(a, 1, "attribute");
    struct tv items, seen;
    if (tpl_iter_list(r, line, v, &items)) return -1;
    if (tv_dict_new(TD_DICT, 0, &seen) || tv_list_new(TL_GEN, 0, out)) {
        tv_drop(&items);
        return tpl_oom(r, line);
    }
    int rc = 0;
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        struct tv key;
        rc = sort_key(r, line, &items.u.l->v[i], attr, 0, cs && tv_truthy(cs), &key);
        if (rc) break;
        if (!tv_hashable(&key)) {
            rc = tpl_fail(r, line, "unhashable type: '%s'", tpl_type_name(&key));
            tv_drop(&key);
        } else if (tv_dict_get(seen.u.d, &key)) {
            tv_drop(&key);
        } else if (tv_dict_set(&seen, key, tv_none(), NULL) ||
                   tv_list_push(out, tv_ref(items.u.l->v[i]))) {
            rc = tpl_oom(r, line);
        }
    }
    tv_drop(&seen);
    tv_drop(&items);
    if (rc) tv_drop(out);
    return rc;
}

static int min_max(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                   int want_max, struct tv *out) {
    CHECK_ARGS(want_max ? "max" : "min", "case_sensitive", "attribute");
    const struct tv *cs = tpl_arg(a, 0, "case_sensitive"), *attr = tpl_arg(a, 1, "attribute");
    struct tv items, best = {0}, bkey = {0};
    if (tpl_iter_list(r, line, v, &items)) return -1;
    int rc = 0;
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        struct tv key;
        if ((rc = sort_key(r, line, &items.u.l->v[i], attr, 0, cs && tv_truthy(cs), &key))) break;
        int lt = 1;
        if (i && tv_less(want_max ? &bkey : &key, want_max ? &key : &bkey, &lt))
            rc = tpl_fail(r, line, "'<' not supported between instances of '%s' and '%s'",
                          tpl_type_name(&key), tpl_type_name(&bkey));
        if (!rc && lt) {
            tv_drop(&bkey);
            bkey = key;
            best = items.u.l->v[i];
        } else {
            tv_drop(&key);
        }
    }
    *out = items.u.l->n ? tv_ref(best) : tv_undef("No aggregated item, sequence was empty.");
    tv_drop(&bkey);
    tv_drop(&items);
    if (rc) tv_drop(out);
    return rc;
}

int tpl_f_max(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
              struct tv *out) {
    return min_max(r, line, v, a, 1, out);
}
int tpl_f_min(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
              struct tv *out) {
    return min_max(r, line, v, a, 0, out);
}

int tpl_f_sum(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
              struct tv *out) {
    CHECK_ARGS("sum", "attribute", "start");
    const struct tv *attr = tpl_arg(a, 0, "attribute"), *start = tpl_arg(a, 1, "start");
    struct tv items, acc = start ? tv_ref(*start) : tv_int(0);
    if (tpl_iter_list(r, line, v, &items)) return tv_drop(&acc), -1;
    int rc = 0;
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        struct tv x, s;
        if ((rc = attr_get(r, line, &items.u.l->v[i], attr, NULL, &x))) break;
        rc = tpl_binop(r, line, OP_ADD, &acc, &x, &s);
        tv_drop(&x);
        if (!rc) {
            tv_drop(&acc);
            acc = s;
        }
    }
    tv_drop(&items);
    if (rc) return tv_drop(&acc), -1;
    *out = acc;
    return 0;
}

int tpl_f_join(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
               struct tv *out) {
    CHECK_ARGS("join", "d", "attribute");
    const struct tv *d = tpl_arg(a, 0, "d"), *attr = tpl_arg(a, 1, "attribute");
    struct tv items, sep;
    if (tpl_iter_list(r, line, v, &items)) return -1;
    if (d ? tpl_str_value(r, d, &sep) : tv_str_new("", 0, &sep))
        return tv_drop(&items), r->failed ? -1 : tpl_oom(r, line);
    struct tpl_buf b = {0};
    int rc = 0;
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        struct tv x;
        if (i) rc = tpl_buf_put(r, &b, sep.u.s->s, sep.u.s->len);
        if (!rc) rc = attr_get(r, line, &items.u.l->v[i], attr, NULL, &x);
        if (!rc) {
            rc = tpl_to_str(r, &x, &b);
            tv_drop(&x);
        }
    }
    if (!rc && tv_str_new(b.p ? b.p : "", b.n, out)) rc = tpl_oom(r, line);
    tpl_buf_free(&b);
    tv_drop(&sep);
    tv_drop(&items);
    return rc;
}

int tpl_f_list(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
               struct tv *out) {
    if (tpl_args_check(r, line, a, "list", NULL, 0)) return -1;
    struct tv items;
    if (tpl_iter_list(r, line, v, &items)) return -1;
    if (items.u.l->kind == TL_LIST) {
        *out = items;
        return 0;
    }
    if (tv_list_new(TL_LIST, items.u.l->n, out)) return tv_drop(&items), tpl_oom(r, line);
    for (size_t i = 0; i < items.u.l->n; i++)
        if (tv_list_push(out, tv_ref(items.u.l->v[i])))
            return tv_drop(&items), tv_drop(out), tpl_oom(r, line);
    tv_drop(&items);
    return 0;
}

int tpl_f_first(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                struct tv *out) {
    if (tpl_args_check(r, line, a, "first", NULL, 0)) return -1;
    struct tv items;
    if (tpl_iter_list(r, line, v, &items)) return -1;
    *out = items.u.l->n ? tv_ref(items.u.l->v[0]) : tv_undef("No first item, sequence was empty.");
    tv_drop(&items);
    return 0;
}

int tpl_f_last(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
               struct tv *out) {
    if (tpl_args_check(r, line, a, "last", NULL, 0)) return -1;
    if (v->t == TV_LIST && v->u.l->kind == TL_GEN)
        return tpl_fail(r, line, "'generator' object is not reversible");
    struct tv items;
    if (tpl_iter_list(r, line, v, &items)) return -1;
    size_t n = items.u.l->n;
    *out = n ? tv_ref(items.u.l->v[n - 1]) : tv_undef("No last item, sequence was empty.");
    tv_drop(&items);
    return 0;
}

int tpl_f_reverse(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                  struct tv *out) {
    if (tpl_args_check(r, line, a, "reverse", NULL, 0)) return -1;
    struct tv items;
    if (v->t == TV_STR) {
        struct tv bounds[3] = {tv_none(), tv_none(), tv_int(-1)};
        return tpl_slice(r, line, v, bounds, out);
    }
    int gen = v->t == TV_LIST && v->u.l->kind == TL_GEN;
    if (tpl_iter_list(r, line, v, &items)) return -1;
    size_t n = items.u.l->n;
    if (tv_list_new(gen ? TL_LIST : TL_GEN, n, out)) return tv_drop(&items), tpl_oom(r, line);
    for (size_t i = n; i-- > 0;)
        if (tv_list_push(out, tv_ref(items.u.l->v[i])))
            return tv_drop(&items), tv_drop(out), tpl_oom(r, line);
    tv_drop(&items);
    return 0;
}

int tpl_f_items(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                struct tv *out) {
    if (tpl_args_check(r, line, a, "items", NULL, 0)) return -1;
    if (v->t == TV_UNDEF) return tv_list_new(TL_GEN, 0, out) ? tpl_oom(r, line) : 0;
    if (v->t != TV_DICT || v->u.d->kind != TD_DICT)
        return tpl_fail(r, line, "Can only get item pairs from a mapping.");
    const struct tv_dict *d = v->u.d;
    if (tv_list_new(TL_GEN, d->n, out)) return tpl_oom(r, line);
    for (size_t i = 0; i < d->n; i++) {
        struct tv pair;
        if (tv_list_new(TL_TUPLE, 2, &pair) || tv_list_push(&pair, tv_ref(d->k[i])) ||
            tv_list_push(&pair, tv_ref(d->v[i])) || tv_list_push(out, pair))
            return tv_drop(out), tpl_oom(r, line);
    }
    return 0;
}

int tpl_f_attr(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
               struct tv *out) {
    CHECK_ARGS("attr", "name");
    const struct tv *name = tpl_arg(a, 0, "name");
    if (!name || name->t != TV_STR) return tpl_fail(r, line, "attr() needs a name");
    if (v->t == TV_DICT && v->u.d->kind == TD_DICT && !tpl_has_method(v, name->u.s->s)) {
        *out = tv_undef(NULL); /* attr() does not fall back to items */
        return 0;
    }
    if (tpl_getattr(r, line, v, name->u.s->s, out)) return -1;
    if (out->t == TV_UNDEF) out->u.hint = NULL;
    return 0;
}

/* ---- map / select / reject ---- */

static struct tpl_args rest_args(const struct tpl_args *a, size_t skip) {
    struct tpl_args s = *a;
    s.n = a->n > skip ? a->n - skip : 0;
    s.pos = a->pos + (a->n > skip ? skip : a->n);
    return s;
}

int tpl_f_map(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
              struct tv *out) {
    const struct tv *attr = NULL, *dflt = NULL;
    if (!a->n) {
        attr = tpl_arg(a, 99, "attribute");
        dflt = tpl_arg(a, 99, "default");
        for (size_t k = 0; k < a->n_kw; k++)
            if (strcmp(a->kw[k], "attribute") && strcmp(a->kw[k], "default"))
                return tpl_fail(r, line, "Unexpected keyword argument '%s'", a->kw[k]);
        if (!attr) return tpl_fail(r, line, "map requires a filter argument");
    } else if (a->pos[0].t != TV_STR) {
        return tpl_fail(r, line, "map needs a filter name");
    }
    struct tv items;
    if (!tv_truthy(v)) return tv_list_new(TL_GEN, 0, out) ? tpl_oom(r, line) : 0;
    if (tpl_iter_list(r, line, v, &items)) return -1;
    if (tv_list_new(TL_GEN, items.u.l->n, out)) return tv_drop(&items), tpl_oom(r, line);
    struct tpl_args sub = rest_args(a, 1);
    int rc = 0;
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        struct tv x;
        rc = attr ? attr_get(r, line, &items.u.l->v[i], attr, dflt, &x)
                  : tpl_filter(r, line, a->pos[0].u.s->s, &items.u.l->v[i], &sub, &x);
        if (!rc && tv_list_push(out, x)) rc = tpl_oom(r, line);
    }
    tv_drop(&items);
    if (rc) tv_drop(out);
    return rc;
}

static int select_impl(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                       int by_attr, int keep_if, struct tv *out) {
    const struct tv *attr = NULL;
    size_t off = 0;
    if (by_attr) {
        if (!a->n) return tpl_fail(r, line, "Missing parameter for attribute name");
        attr = &a->pos[0];
        off = 1;
    }
    const char *test = NULL;
    if (a->n > off) {
        if (a->pos[off].t != TV_STR) return tpl_fail(r, line, "the test name must be a string");
        test = a->pos[off].u.s->s;
    }
    struct tpl_args sub = rest_args(a, off + 1);
    struct tv items;
    if (!tv_truthy(v)) return tv_list_new(TL_GEN, 0, out) ? tpl_oom(r, line) : 0;
    if (tpl_iter_list(r, line, v, &items)) return -1;
    if (tv_list_new(TL_GEN, 0, out)) return tv_drop(&items), tpl_oom(r, line);
    int rc = 0;
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        struct tv x;
        int res = 0;
        if ((rc = attr_get(r, line, &items.u.l->v[i], attr, NULL, &x))) break;
        if (test)
            rc = tpl_test(r, line, test, &x, &sub, &res);
        else
            res = tv_truthy(&x);
        tv_drop(&x);
        if (!rc && !res == !keep_if && tv_list_push(out, tv_ref(items.u.l->v[i])))
            rc = tpl_oom(r, line);
    }
    tv_drop(&items);
    if (rc) tv_drop(out);
    return rc;
}

int tpl_f_select(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                 struct tv *out) {
    return select_impl(r, line, v, a, 0, 1, out);
}
int tpl_f_reject(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                 struct tv *out) {
    return select_impl(r, line, v, a, 0, 0, out);
}
int tpl_f_selectattr(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                     struct tv *out) {
    return select_impl(r, line, v, a, 1, 1, out);
}
int tpl_f_rejectattr(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                     struct tv *out) {
    return select_impl(r, line, v, a, 1, 0, out);
}

/* ---- batch / slice ---- */

static int chunks(struct tpl_render *r, int line, const struct tv *v, int64_t count, int slices,
                  const struct tv *fill, struct tv *out) {
    struct tv items;
    if (count <= 0)
        return tpl_fail(r, line, "%s must be positive", slices ? "slices" : "linecount");
    if (tpl_iter_list(r, line, v, &items)) return -1;
    size_t n = items.u.l->n, per = slices ? n / (size_t)count : (size_t)count;
    size_t extra = slices ? n % (size_t)count : 0,
           groups = slices ? (size_t)count : (n + per - 1) / per;
    if (tpl_step(r, line, groups + n) || tv_list_new(TL_GEN, groups, out))
        return tv_drop(&items), r->failed ? -1 : tpl_oom(r, line);
    size_t pos = 0;
    int rc = 0;
    for (size_t g = 0; g < groups && !rc; g++) {
        size_t len = slices ? per + (g < extra) : (n - pos < per ? n - pos : per);
        struct tv grp;
        if (tv_list_new(TL_LIST, len + 1, &grp)) {
            rc = tpl_oom(r, line);
            break;
        }
        for (size_t i = 0; i < len && !rc; i++)
            if (tv_list_push(&grp, tv_ref(items.u.l->v[pos + i]))) rc = tpl_oom(r, line);
        pos += len;
        if (fill && fill->t != TV_NONE && !rc) {
            size_t want = slices ? (g >= extra ? 1 : 0) : per - len;
            for (size_t i = 0; i < want && !rc; i++)
                if (tv_list_push(&grp, tv_ref(*fill))) rc = tpl_oom(r, line);
        }
        if (rc || tv_list_push(out, grp)) rc = rc ? rc : tpl_oom(r, line);
    }
    tv_drop(&items);
    if (rc) tv_drop(out);
    return rc;
}

int tpl_f_batch(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                struct tv *out) {
    CHECK_ARGS("batch", "linecount", "fill_with");
    const struct tv *c = tpl_arg(a, 0, "linecount");
    if (!c || (c->t != TV_INT && c->t != TV_BOOL))
        return tpl_fail(r, line, "batch needs an integer linecount");
    return chunks(r, line, v, c->u.i, 0, tpl_arg(a, 1, "fill_with"), out);
}

int tpl_f_slice(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                struct tv *out) {
    CHECK_ARGS("slice", "slices", "fill_with");
    const struct tv *c = tpl_arg(a, 0, "slices");
    if (!c || (c->t != TV_INT && c->t != TV_BOOL))
        return tpl_fail(r, line, "slice needs an integer count");
    if (c->u.i > 100000) return tpl_fail(r, line, "too many slices");
    return chunks(r, line, v, c->u.i, 1, tpl_arg(a, 1, "fill_with"), out);
}
