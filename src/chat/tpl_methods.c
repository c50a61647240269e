/* chat/tpl_methods.c: Python methods reachable from templates: str methods (split, strip,
 * startswith, replace, find, format, ...), the read-only dict and list methods the immutable
 * sandbox allows (get, items, keys, values, index, count, copy) and loop.cycle/changed.
 * Methods that would modify a list or dict are absent, so calling them fails as in jinja2. */
#include "chat/tpl_impl.h"

#include "chat/tpl_pystr.h"

#include <stdio.h>
#include <string.h>
#include <utf8proc.h>

static const char *const STR_METHODS[] = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill",
};
static const char *const DICT_METHODS[] = {"copy", "get", "items", "keys", "values"};
static const char *const LIST_METHODS[] = {"copy", "count", "index"};
static const char *const LOOP_METHODS[] = {"cycle", "changed"};

static const char *find_name(const char *const *names, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return names[i];
    return NULL;
}
#define FIND(tab, name) find_name(tab, sizeof tab / sizeof *tab, name)

const char *tpl_method_name(const struct tv *self, const char *name) {
    switch (self->t) {
    case TV_STR:
        return FIND(STR_METHODS, name);
    case TV_DICT:
        return self->u.d->kind == TD_DICT ? FIND(DICT_METHODS, name) : NULL;
    case TV_LIST:
        if (self->u.l->kind == TL_LIST) return FIND(LIST_METHODS, name);
        if (self->u.l->kind == TL_TUPLE)
            return strcmp(name, "copy") ? FIND(LIST_METHODS, name) : NULL;
        return NULL;
    case TV_LOOP:
        return FIND(LOOP_METHODS, name);
    default:
        return NULL;
    }
}

int tpl_has_method(const struct tv *self, const char *name) {
    return tpl_method_name(self, name) != NULL;
}

static const struct tv *opt_str(struct tpl_render *r, int line, const struct tv *v,
                                const char *what) {
    if (!v || v->t == TV_NONE) return NULL;
    if (v->t != TV_STR) tpl_fail(r, line, "%s must be None or str, not %s", what, tpl_type_name(v));
    return v;
}

static int int_or(struct tpl_render *r, int line, const struct tv *v, int64_t dflt, int64_t *out) {
    if (!v) return *out = dflt, 0;
    if (v->t != TV_INT && v->t != TV_BOOL)
        return tpl_fail(r, line, "'%s' object cannot be interpreted as an integer",
                        tpl_type_name(v));
    return *out = v->u.i, 0;
}

static int need_str(struct tpl_render *r, int line, const struct tv *v, const char *m) {
    if (v && v->t == TV_STR) return 0;
    return tpl_fail(r, line, "%s() argument must be str, not %s", m,
                    v ? tpl_type_name(v) : "nothing");
}

static int affix(struct tpl_render *r, int line, const struct tv_str *s, struct tpl_args *a,
                 int end, int *out) {
    const struct tv *p = tpl_arg(a, 0, NULL);
    size_t lo, hi;
    tpl_py_range(s, tpl_arg(a, 1, NULL), tpl_arg(a, 2, NULL), &lo, &hi);
    if (!p)
        return tpl_fail(r, line, "%s() takes at least 1 argument", end ? "endswith" : "startswith");
    const struct tv *items = p;
    size_t n = 1;
    if (p->t == TV_LIST && p->u.l->kind == TL_TUPLE) {
        items = p->u.l->v;
        n = p->u.l->n;
    }
    *out = 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].t != TV_STR)
            return tpl_fail(r, line, "%s first arg must be str or a tuple of str, not %s",
                            end ? "endswith" : "startswith", tpl_type_name(&items[i]));
        const struct tv_str *x = items[i].u.s;
        if (lo > s->len || hi < lo || hi - lo < x->len) continue;
        if (!memcmp(s->s + (end ? hi - x->len : lo), x->s, x->len)) *out = 1;
    }
    return 0;
}

static int is_class(const struct tv_str *s, const char *what) {
    if (!s->len) return 0;
    int cased = 0, prev_cased = 0;
    for (size_t i = 0; i < s->len;) {
        uint32_t cp = tpl_utf8_next(s->s, &i);
        utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
        int alpha = c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
        int digit = c == UTF8PROC_CATEGORY_ND,
            num = c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
        int up = utf8proc_isupper((utf8proc_int32_t)cp) || c == UTF8PROC_CATEGORY_LT,
            low = utf8proc_islower((utf8proc_int32_t)cp);
        if (!strcmp(what, "isalpha") && !alpha) return 0;
        if (!strcmp(what, "isalnum") && !alpha && !num) return 0;
        if ((!strcmp(what, "isdigit") || !strcmp(what, "isdecimal")) && !digit) return 0;
        if (!strcmp(what, "isnumeric") && !num) return 0;
        if (!strcmp(what, "isspace") && !tpl_py_isspace(cp)) return 0;
        if (!strcmp(what, "isascii") && cp > 0x7F) return 0;
        if (!strcmp(what, "islower") && up) return 0;
        if (!strcmp(what, "isupper") && low) return 0;
        if (!strcmp(what, "istitle")) {
            if ((up && prev_cased) || (low && !prev_cased)) return 0;
            prev_cased = up || low;
        }
        cased |= up || low;
    }
    if (!strcmp(what, "isascii")) return 1;
    if (!strcmp(what, "islower") || !strcmp(what, "isupper") || !strcmp(what, "istitle"))
        return cased;
    return 1;
}

/* str.format with {} / {0} / {name}, optional !s/!r; format specs are not supported. */
static int str_format(struct tpl_render *r, int line, const struct tv_str *f, struct tpl_args *a,
                      struct tv *out) {
    struct tpl_buf b = {0};
    size_t auto_i = 0;
    int rc = 0;
    for (size_t i = 0; i < f->len && !rc; i++) {
        char c = f->s[i];
        if ((c == '{' || c == '}') && i + 1 < f->len && f->s[i + 1] == c) {
            rc = tpl_buf_put(r, &b, &c, 1);
            i++;
            continue;
        }
        if (c == '}') {
            rc = tpl_fail(r, line, "Single '}' encountered in format string");
            break;
        }
        if (c != '{') {
            rc = tpl_buf_put(r, &b, &c, 1);
            continue;
        }
        size_t j = i + 1;
        while (j < f->len && f->s[j] != '}' && f->s[j] != '!' && f->s[j] != ':') j++;
        char conv = 's';
        size_t k = j;
        if (k < f->len && f->s[k] == '!' && k + 1 < f->len) conv = f->s[++k], k++;
        if (k >= f->len || f->s[k] != '}') {
            rc = tpl_fail(r, line, "unsupported or malformed replacement field in str.format");
            break;
        }
        const struct tv *v = NULL;
        size_t n = j - i - 1;
        if (n == 0)
            v = auto_i < a->n ? &a->pos[auto_i++] : NULL;
        else if (f->s[i + 1] >= '0' && f->s[i + 1] <= '9') {
            size_t idx = 0;
            for (size_t q = i + 1; q < j; q++) idx = idx * 10 + (size_t)(f->s[q] - '0');
            v = idx < a->n ? &a->pos[idx] : NULL;
        } else {
            for (size_t q = 0; q < a->n_kw; q++)
                if (strlen(a->kw[q]) == n && !memcmp(a->kw[q], f->s + i + 1, n)) v = &a->kwv[q];
        }
        if (!v) {
            rc = tpl_fail(r, line, "str.format: missing argument for field");
            break;
        }
        rc = conv == 'r' ? tpl_repr(r, v, &b, 0) : tpl_to_str(r, v, &b);
        i = k;
    }
    if (!rc && tv_str_new(b.p ? b.p : "", b.n, out)) rc = tpl_oom(r, line);
    tpl_buf_free(&b);
    return rc;
}

static int str_join(struct tpl_render *r, int line, const struct tv_str *sep, const struct tv *it,
                    struct tv *out) {
    struct tv items;
    if (!it || tpl_iter_list(r, line, it, &items))
        return r->failed ? -1 : tpl_fail(r, line, "join() takes exactly one argument");
    struct tpl_buf b = {0};
    int rc = 0;
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        const struct tv *x = &items.u.l->v[i];
        if (x->t != TV_STR) {
            rc = tpl_fail(r, line, "sequence item %zu: expected str instance, %s found", i,
                          tpl_type_name(x));
            break;
        }
        if (i) rc = tpl_buf_put(r, &b, sep->s, sep->len);
        if (!rc) rc = tpl_buf_put(r, &b, x->u.s->s, x->u.s->len);
    }
    if (!rc && tv_str_new(b.p ? b.p : "", b.n, out)) rc = tpl_oom(r, line);
    tpl_buf_free(&b);
    tv_drop(&items);
    return rc;
}

static int partition(struct tpl_render *r, int line, const struct tv_str *s, const struct tv *sep,
                     int right, struct tv *out) {
    if (need_str(r, line, sep, right ? "rpartition" : "partition")) return -1;
    if (!sep->u.s->len) return tpl_fail(r, line, "empty separator");
    int64_t at = tpl_py_find(s, sep->u.s, NULL, NULL, right);
    size_t off[3], len[3];
    if (at < 0) { /* ('abc', '', '') or ('', '', 'abc') */
        off[0] = off[1] = off[2] = 0;
        len[0] = right ? 0 : s->len;
        len[1] = 0;
        len[2] = right ? s->len : 0;
    } else {
        size_t a = tpl_utf8_offset(s, (size_t)at), e = a + sep->u.s->len;
        off[0] = 0, len[0] = a;
        off[1] = a, len[1] = sep->u.s->len;
        off[2] = e, len[2] = s->len - e;
    }
    if (tv_list_new(TL_TUPLE, 3, out)) return tpl_oom(r, line);
    for (int i = 0; i < 3; i++) {
        struct tv p;
        if (tv_str_new(s->s + off[i], len[i], &p) || tv_list_push(out, p))
            return tv_drop(out), tpl_oom(r, line);
    }
    return 0;
}

static int str_method(struct tpl_render *r, int line, const struct tv_str *s, const char *m,
                      struct tpl_args *a, struct tv *out) {
    const struct tv *a0 = tpl_arg(a, 0, NULL), *a1 = tpl_arg(a, 1, NULL);
    int64_t n = 0;
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        const struct tv *sep = opt_str(r, line, tpl_arg(a, 0, "sep"), "sep");
        if (r->failed || int_or(r, line, tpl_arg(a, 1, "maxsplit"), -1, &n)) return -1;
        return tpl_py_split(r, line, s, sep ? sep->u.s : NULL, n, m[0] == 'r', out);
    }
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        const struct tv *chars = opt_str(r, line, a0, "chars");
        if (r->failed) return -1;
        return tpl_py_strip(r, s, chars ? chars->u.s : NULL, m[0] != 'r', m[0] != 'l', out);
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        int res = 0;
        if (affix(r, line, s, a, m[0] == 'e', &res)) return -1;
        return *out = tv_bool(res), 0;
    }
    if (!strcmp(m, "replace")) {
        if (need_str(r, line, a0, m) || need_str(r, line, a1, m)) return -1;
        if (int_or(r, line, tpl_arg(a, 2, "count"), -1, &n)) return -1;
        return tpl_py_replace(r, line, s, a0->u.s, a1->u.s, n, out);
    }
    static const struct {
        const char *name;
        enum tpl_case mode;
    } cases[] = {{"upper", CASE_UPPER},   {"lower", CASE_LOWER},           {"casefold", CASE_LOWER},
                 {"swapcase", CASE_SWAP}, {"capitalize", CASE_CAPITALIZE}, {"title", CASE_TITLE}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (!strcmp(m, cases[i].name)) return tpl_py_case(r, s, cases[i].mode, out);
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex")) {
        if (need_str(r, line, a0, m)) return -1;
        int64_t at = tpl_py_find(s, a0->u.s, a1, tpl_arg(a, 2, NULL), m[0] == 'r');
        if (at < 0 && strstr(m, "index")) return tpl_fail(r, line, "substring not found");
        return *out = tv_int(at), 0;
    }
    if (!strcmp(m, "count")) {
        if (need_str(r, line, a0, m)) return -1;
        return *out = tv_int(tpl_py_count(s, a0->u.s, a1, tpl_arg(a, 2, NULL))), 0;
    }
    if (!strcmp(m, "splitlines")) {
        const struct tv *k = tpl_arg(a, 0, "keepends");
        return tpl_py_splitlines(r, s, k && tv_truthy(k), out);
    }
    if (!strcmp(m, "join")) return str_join(r, line, s, a0, out);
    if (!strcmp(m, "center") || !strcmp(m, "ljust") || !strcmp(m, "rjust") || !strcmp(m, "zfill")) {
        uint32_t fill = m[0] == 'z' ? '0' : ' ';
        if (!a0 || int_or(r, line, a0, 0, &n))
            return r->failed ? -1 : tpl_fail(r, line, "%s() needs a width", m);
        if (a1) {
            if (a1->t != TV_STR || a1->u.s->n_cp != 1)
                return tpl_fail(r, line, "the fill character must be exactly one character long");
            size_t i = 0;
            fill = tpl_utf8_next(a1->u.s->s, &i);
        }
        if (m[0] == 'z' && s->len && (s->s[0] == '-' || s->s[0] == '+')) { /* sign stays in front */
            struct tv rest, pad;
            struct tv_str *tail;
            if (tv_str_new(s->s + 1, s->len - 1, &rest)) return tpl_oom(r, line);
            tail = rest.u.s;
            int rc = tpl_py_pad(r, line, tail, n - 1, '0', 2, &pad);
            tv_drop(&rest);
            if (rc) return -1;
            struct tv sign;
            if (tv_str_new(s->s, 1, &sign)) return tv_drop(&pad), tpl_oom(r, line);
            rc = tv_str_cat(sign.u.s, pad.u.s, out) ? tpl_oom(r, line) : 0;
            tv_drop(&sign);
            tv_drop(&pad);
            return rc;
        }
        return tpl_py_pad(r, line, s, n, fill, m[0] == 'c' ? 0 : m[0] == 'l' ? 1 : 2, out);
    }
    if (!strcmp(m, "partition") || !strcmp(m, "rpartition"))
        return partition(r, line, s, a0, m[0] == 'r', out);
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        if (need_str(r, line, a0, m)) return -1;
        const struct tv_str *x = a0->u.s;
        int pre = m[6] == 'p';
        if (x->len <= s->len && !memcmp(pre ? s->s : s->s + s->len - x->len, x->s, x->len))
            return tv_str_new(pre ? s->s + x->len : s->s, s->len - x->len, out) ? tpl_oom(r, line)
                                                                                : 0;
        return tv_str_new(s->s, s->len, out) ? tpl_oom(r, line) : 0;
    }
    if (!strncmp(m, "is", 2) && strcmp(m, "isidentifier") && strcmp(m, "isprintable"))
        return *out = tv_bool(is_class(s, m)), 0;
    if (!strcmp(m, "format")) return str_format(r, line, s, a, out);
    return tpl_fail(r, line, "the str method '%s' is not supported", m);
}

static int loop_method(struct tpl_render *r, int line, struct tv_loop *l, const char *m,
                       struct tpl_args *a, struct tv *out) {
    if (!strcmp(m, "cycle")) {
        if (!a->n) return tpl_fail(r, line, "no items for cycling given");
        return *out = tv_ref(a->pos[l->i % a->n]), 0;
    }
    struct tv now;
    if (tv_list_new(TL_TUPLE, a->n, &now)) return tpl_oom(r, line);
    for (size_t i = 0; i < a->n; i++)
        if (tv_list_push(&now, tv_ref(a->pos[i]))) return tv_drop(&now), tpl_oom(r, line);
    int changed = !l->has_changed || !tv_equal(&now, &l->changed);
    tv_drop(&l->changed);
    l->changed = now;
    l->has_changed = 1;
    return *out = tv_bool(changed), 0;
}

int tpl_method(struct tpl_render *r, int line, const struct tv *self, const char *name,
               struct tpl_args *a, struct tv *out) {
    if (tpl_step(r, line, 1)) return -1;
    if (self->t == TV_STR) return str_method(r, line, self->u.s, name, a, out);
    if (self->t == TV_LOOP) return loop_method(r, line, self->u.loop, name, a, out);
    const struct tv *a0 = tpl_arg(a, 0, NULL);
    if (self->t == TV_DICT) {
        const struct tv_dict *d = self->u.d;
        if (!strcmp(name, "get")) {
            if (!a0) return tpl_fail(r, line, "get expected at least 1 argument, got 0");
            const struct tv *v = tv_hashable(a0) ? tv_dict_get(d, a0) : NULL,
                            *dflt = tpl_arg(a, 1, NULL);
            if (!tv_hashable(a0))
                return tpl_fail(r, line, "unhashable type: '%s'", tpl_type_name(a0));
            *out = v ? tv_ref(*v) : dflt ? tv_ref(*dflt) : tv_none();
            return 0;
        }
        if (!strcmp(name, "copy")) {
            if (tv_dict_new(TD_DICT, d->n, out)) return tpl_oom(r, line);
            for (size_t i = 0; i < d->n; i++)
                if (tv_dict_set(out, tv_ref(d->k[i]), tv_ref(d->v[i]), NULL))
                    return tv_drop(out), tpl_oom(r, line);
            return 0;
        }
        int kind = !strcmp(name, "items") ? TL_ITEMS : !strcmp(name, "keys") ? TL_KEYS : TL_VALUES;
        if (tpl_step(r, line, d->n) || tv_list_new(kind, d->n, out))
            return r->failed ? -1 : tpl_oom(r, line);
        for (size_t i = 0; i < d->n; i++) {
            struct tv x;
            if (kind == TL_ITEMS) {
                if (tv_list_new(TL_TUPLE, 2, &x) || tv_list_push(&x, tv_ref(d->k[i])) ||
                    tv_list_push(&x, tv_ref(d->v[i])))
                    return tv_drop(out), tpl_oom(r, line);
            } else {
                x = tv_ref(kind == TL_KEYS ? d->k[i] : d->v[i]);
            }
            if (tv_list_push(out, x)) return tv_drop(out), tpl_oom(r, line);
        }
        return 0;
    }
    if (self->t == TV_LIST) {
        const struct tv_list *l = self->u.l;
        if (!strcmp(name, "copy")) {
            if (tv_list_new(TL_LIST, l->n, out)) return tpl_oom(r, line);
            for (size_t i = 0; i < l->n; i++)
                if (tv_list_push(out, tv_ref(l->v[i]))) return tv_drop(out), tpl_oom(r, line);
            return 0;
        }
        if (!a0) return tpl_fail(r, line, "%s() takes at least 1 argument", name);
        int64_t count = 0;
        if (tpl_step(r, line, l->n)) return -1;
        for (size_t i = 0; i < l->n; i++) {
            if (!tv_equal(&l->v[i], a0)) continue;
            if (name[0] == 'i') return *out = tv_int((int64_t)i), 0;
            count++;
        }
        if (name[0] == 'i') return tpl_fail(r, line, "the value is not in the list");
        return *out = tv_int(count), 0;
    }
    return tpl_fail(r, line, "'%s' object has no method '%s'", tpl_type_name(self), name);
}
