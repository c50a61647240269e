/* chat/tpl_filters.c: jinja2's filters on single values (strings and numbers) and the filter
 * table. Each filter takes the value, its arguments by position or name as jinja2 declares
 * them, and returns a new value. tojson is transformers' version (json.dumps with
 * ensure_ascii=False). Filters jinja2 has but chat templates do not use fail when called. */
#include "chat/tpl_impl.h"

#include "chat/tpl_filters.h"
#include "chat/tpl_pystr.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define CHECK_NONE(what)                                                                           \
    do {                                                                                           \
        if (tpl_args_check(r, line, a, what, NULL, 0)) return -1;                                  \
    } while (0)
#define CHECK_ARGS(what, ...)                                                                      \
    do {                                                                                           \
        static const char *const names_[] = {__VA_ARGS__};                                         \
        if (tpl_args_check(r, line, a, what, names_, sizeof names_ / sizeof *names_)) return -1;   \
    } while (0)

static int int_arg(struct tpl_render *r, int line, const struct tv *v, int64_t dflt, int64_t *out) {
    if (!v || v->t == TV_NONE) {
        *out = dflt;
        return 0;
    }
    if (v->t != TV_INT && v->t != TV_BOOL)
        return tpl_fail(r, line, "'%s' object cannot be interpreted as an integer",
                        tpl_type_name(v));
    *out = v->u.i;
    return 0;
}

/* ---- string filters ---- */

static int f_case(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                  enum tpl_case mode, struct tv *out) {
    CHECK_NONE("filter");
    struct tv s;
    if (tpl_str_value(r, v, &s)) return -1;
    int rc = tpl_py_case(r, s.u.s, mode, out);
    tv_drop(&s);
    return rc;
}

static int f_upper(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                   struct tv *out) {
    return f_case(r, line, v, a, CASE_UPPER, out);
}
static int f_lower(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                   struct tv *out) {
    return f_case(r, line, v, a, CASE_LOWER, out);
}
static int f_capitalize(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                        struct tv *out) {
    return f_case(r, line, v, a, CASE_CAPITALIZE, out);
}

/* jinja2's title: upper-case the first character after `-`, whitespace or an opening bracket. */
static int f_title(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                   struct tv *out) {
    CHECK_NONE("title");
    struct tv s;
    if (tpl_str_value(r, v, &s)) return -1;
    struct tpl_buf b = {0};
    int rc = 0, start = 1;
    for (size_t i = 0; i < s.u.s->len && !rc;) {
        uint32_t cp = tpl_utf8_next(s.u.s->s, &i);
        int sep =
            cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || tpl_py_isspace(cp);
        uint32_t m = start ? (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp) : tpl_py_lower(cp);
        char tmp[4];
        rc = tpl_buf_put(r, &b, tmp, tpl_utf8_put(m, tmp));
        start = sep;
    }
    tv_drop(&s);
    if (!rc && tv_str_new(b.p ? b.p : "", b.n, out)) rc = tpl_oom(r, line);
    tpl_buf_free(&b);
    return rc;
}

static int f_trim(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                  struct tv *out) {
    CHECK_ARGS("trim", "chars");
    const struct tv *chars = tpl_arg(a, 0, "chars");
    if (chars && chars->t != TV_NONE && chars->t != TV_STR)
        return tpl_fail(r, line, "strip arg must be None or str");
    struct tv s;
    if (tpl_str_value(r, v, &s)) return -1;
    int rc = tpl_py_strip(r, s.u.s, chars && chars->t == TV_STR ? chars->u.s : NULL, 1, 1, out);
    tv_drop(&s);
    return rc;
}

static int f_string(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                    struct tv *out) {
    CHECK_NONE("string");
    return tpl_str_value(r, v, out);
}

static int f_safe(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                  struct tv *out) {
    CHECK_NONE("safe");
    struct tv s;
    if (tpl_str_value(r, v, &s)) return -1;
    if (tv_str_new(s.u.s->s, s.u.s->len, out)) return tv_drop(&s), tpl_oom(r, line);
    tv_drop(&s);
    out->u.s->markup = 1;
    return 0;
}

static int f_escape(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                    struct tv *out) {
    CHECK_NONE("escape");
    return tpl_escape_str(r, v, out);
}

static int f_replace(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                     struct tv *out) {
    CHECK_ARGS("replace", "old", "new", "count");
    const struct tv *o = tpl_arg(a, 0, "old"), *n = tpl_arg(a, 1, "new");
    int64_t count = -1;
    if (!o || !n) return tpl_fail(r, line, "replace() needs old and new");
    if (int_arg(r, line, tpl_arg(a, 2, "count"), -1, &count)) return -1;
    struct tv s, so, sn;
    if (tpl_str_value(r, v, &s)) return -1;
    if (tpl_str_value(r, o, &so)) return tv_drop(&s), -1;
    if (tpl_str_value(r, n, &sn)) return tv_drop(&s), tv_drop(&so), -1;
    int rc = tpl_py_replace(r, line, s.u.s, so.u.s, sn.u.s, count, out);
    tv_drop(&s);
    tv_drop(&so);
    tv_drop(&sn);
    return rc;
}

static int f_center(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                    struct tv *out) {
    CHECK_ARGS("center", "width");
    int64_t width = 0;
    if (int_arg(r, line, tpl_arg(a, 0, "width"), 80, &width)) return -1;
    struct tv s;
    if (tpl_str_value(r, v, &s)) return -1;
    int rc = tpl_py_pad(r, line, s.u.s, width, ' ', 0, out);
    tv_drop(&s);
    return rc;
}

static int f_indent(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                    struct tv *out) {
    CHECK_ARGS("indent", "width", "first", "blank");
    const struct tv *w = tpl_arg(a, 0, "width"), *first = tpl_arg(a, 1, "first"),
                    *blank = tpl_arg(a, 2, "blank");
    struct tpl_buf ind = {0}, b = {0};
    int rc = 0;
    if (w && w->t == TV_STR)
        rc = tpl_buf_put(r, &ind, w->u.s->s, w->u.s->len);
    else {
        int64_t n = 0;
        if (int_arg(r, line, w, 4, &n)) return -1;
        if (n > 4096) return tpl_fail(r, line, "indent width too large");
        for (int64_t i = 0; i < n && !rc; i++) rc = tpl_buf_put(r, &ind, " ", 1);
    }
    struct tv s, lines = {0}, src;
    if (v->t != TV_STR) { /* jinja2 appends "\n" to the value itself */
        tpl_buf_free(&ind);
        return v->t == TV_UNDEF
                   ? tpl_undefined_error(r, line, v)
                   : tpl_fail(r, line, "unsupported operand type(s) for +=: '%s' and 'str'",
                              tpl_type_name(v));
    }
    if (rc || tpl_str_value(r, v, &s)) return tpl_buf_free(&ind), -1;
    /* s += "\n"; lines = s.splitlines() */
    struct tv nlv;
    if (tv_str_new("\n", 1, &nlv) || tv_str_cat(s.u.s, nlv.u.s, &src)) {
        tv_drop(&nlv);
        tv_drop(&s);
        tpl_buf_free(&ind);
        return tpl_oom(r, line);
    }
    tv_drop(&nlv);
    tv_drop(&s);
    rc = tpl_py_splitlines(r, src.u.s, 0, &lines);
    tv_drop(&src);
    const char *is = ind.p ? ind.p : "";
    if (!rc && first && tv_truthy(first)) rc = tpl_buf_put(r, &b, is, ind.n);
    for (size_t i = 0; !rc && i < lines.u.l->n; i++) {
        const struct tv_str *ln = lines.u.l->v[i].u.s;
        if (i) rc = tpl_buf_put(r, &b, "\n", 1);
        if (!rc && i && (ln->len || (blank && tv_truthy(blank))))
            rc = tpl_buf_put(r, &b, is, ind.n);
        if (!rc) rc = tpl_buf_put(r, &b, ln->s, ln->len);
    }
    tv_drop(&lines);
    if (!rc && tv_str_new(b.p ? b.p : "", b.n, out)) rc = tpl_oom(r, line);
    tpl_buf_free(&b);
    tpl_buf_free(&ind);
    return rc;
}

static int f_wordcount(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                       struct tv *out) {
    CHECK_NONE("wordcount");
    struct tv s;
    if (tpl_str_value(r, v, &s)) return -1;
    int64_t n = 0;
    int in_word = 0;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t cp = tpl_utf8_next(s.u.s->s, &i);
        utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
        int w = cp == '_' || (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
                (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
        n += w && !in_word;
        in_word = w;
    }
    tv_drop(&s);
    *out = tv_int(n);
    return 0;
}

static int f_format(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                    struct tv *out) {
    if (a->n && a->n_kw)
        return tpl_fail(r, line, "can't handle positional and keyword arguments at the same time");
    struct tv s, args;
    int rc;
    if (tpl_str_value(r, v, &s)) return -1;
    if (a->n_kw) {
        rc = tv_dict_new(TD_DICT, a->n_kw, &args) ? tpl_oom(r, line) : 0;
        for (size_t k = 0; k < a->n_kw && !rc; k++) {
            struct tv key;
            if (tv_str_c(a->kw[k], &key) || tv_dict_set(&args, key, tv_ref(a->kwv[k]), NULL))
                rc = tpl_oom(r, line);
        }
    } else {
        rc = tv_list_new(TL_TUPLE, a->n, &args) ? tpl_oom(r, line) : 0;
        for (size_t i = 0; i < a->n && !rc; i++)
            if (tv_list_push(&args, tv_ref(a->pos[i]))) rc = tpl_oom(r, line);
    }
    if (!rc) rc = tpl_percent_format(r, line, s.u.s, &args, out);
    tv_drop(&args);
    tv_drop(&s);
    return rc;
}

/* ---- numbers ---- */

/* Python's int(text, base) and float(text): -1 when the text is not a number. */
static int parse_num(const struct tv_str *s, int base, int want_float, int64_t *iv, double *fv) {
    char buf[128];
    size_t a = 0, b = s->len, n = 0;
    while (a < b && (s->s[a] == ' ' || (s->s[a] >= 9 && s->s[a] <= 13))) a++;
    while (b > a && (s->s[b - 1] == ' ' || (s->s[b - 1] >= 9 && s->s[b - 1] <= 13))) b--;
    if (b - a == 0 || b - a >= sizeof buf) return -1;
    for (size_t i = a; i < b; i++) {
        char c = s->s[i];
        if (c == '_') { /* only between digits */
            if (i == a || i + 1 == b || !isxdigit((unsigned char)s->s[i - 1]) ||
                !isxdigit((unsigned char)s->s[i + 1]))
                return -1;
            continue;
        }
        buf[n++] = c;
    }
    buf[n] = 0;
    char *end;
    errno = 0;
    if (want_float) {
        *fv = strtod(buf, &end);
        if (*end || (end == buf)) return -1;
        for (size_t i = 0; i < n; i++) /* strtod also reads hex floats, which float() does not */
            if (buf[i] == 'x' || buf[i] == 'X' || buf[i] == 'p' || buf[i] == 'P') return -1;
        return 0;
    }
    const char *p = buf;
    int neg = 0;
    if (*p == '+' || *p == '-') neg = *p++ == '-';
    if (base == 16 && p[0] == '0' && (p[1] | 32) == 'x')
        p += 2;
    else if (base == 8 && p[0] == '0' && (p[1] | 32) == 'o')
        p += 2;
    else if (base == 2 && p[0] == '0' && (p[1] | 32) == 'b')
        p += 2;
    else if (base == 0) {
        if (p[0] == '0' && (p[1] | 32) == 'x')
            base = 16, p += 2;
        else if (p[0] == '0' && (p[1] | 32) == 'o')
            base = 8, p += 2;
        else if (p[0] == '0' && (p[1] | 32) == 'b')
            base = 2, p += 2;
        else
            base = 10;
    }
    if (!*p || *p == '+' || *p == '-' || base < 2 || base > 36) return -1;
    unsigned long long u = strtoull(p, &end, base);
    if (*end || errno || u > (unsigned long long)INT64_MAX + (unsigned)neg) return -1;
    *iv = neg ? (int64_t)(0 - u) : (int64_t)u;
    return 0;
}

static int f_int(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                 struct tv *out) {
    CHECK_ARGS("int", "default", "base");
    const struct tv *dflt = tpl_arg(a, 0, "default");
    int64_t base = 10, iv = 0;
    double fv;
    if (int_arg(r, line, tpl_arg(a, 1, "base"), 10, &base)) return -1;
    switch (v->t) {
    case TV_UNDEF:
        return tpl_undefined_error(r, line, v);
    case TV_BOOL:
    case TV_INT:
        *out = tv_int(v->u.i);
        return 0;
    case TV_FLOAT:
        fv = v->u.f;
        goto from_float;
    case TV_STR:
        if (!parse_num(v->u.s, (int)base, 0, &iv, &fv)) {
            *out = tv_int(iv);
            return 0;
        }
        if (!parse_num(v->u.s, 10, 1, &iv, &fv)) goto from_float;
        break;
    default:
        break;
    }
    *out = dflt ? tv_ref(*dflt) : tv_int(0);
    return 0;
from_float:
    if (isnan(fv)) {
        *out = dflt ? tv_ref(*dflt) : tv_int(0);
        return 0;
    }
    if (isinf(fv) || fabs(fv) >= 9.2e18)
        return tpl_fail(r, line, "cannot convert float to integer");
    *out = tv_int((int64_t)fv);
    return 0;
}

static int f_float(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                   struct tv *out) {
    CHECK_ARGS("float", "default");
    const struct tv *dflt = tpl_arg(a, 0, "default");
    int64_t iv;
    double fv;
    if (v->t == TV_UNDEF) return tpl_undefined_error(r, line, v);
    if (v->t == TV_INT || v->t == TV_BOOL)
        *out = tv_float((double)v->u.i);
    else if (v->t == TV_FLOAT)
        *out = *v;
    else if (v->t == TV_STR && !parse_num(v->u.s, 10, 1, &iv, &fv))
        *out = tv_float(fv);
    else
        *out = dflt ? tv_ref(*dflt) : tv_float(0.0);
    return 0;
}

static int f_abs(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                 struct tv *out) {
    CHECK_NONE("abs");
    if (v->t == TV_FLOAT)
        *out = tv_float(fabs(v->u.f));
    else if ((v->t == TV_INT || v->t == TV_BOOL) && v->u.i != INT64_MIN)
        *out = tv_int(v->u.i < 0 ? -v->u.i : v->u.i);
    else
        return tpl_fail(r, line, "bad operand type for abs(): '%s'", tpl_type_name(v));
    return 0;
}

/* Python's round(x, ndigits): correctly rounded, ties to even (printf rounds the same way). */
static double py_round(double x, int64_t nd) {
    if (!isfinite(x)) return x;
    if (nd >= 0) {
        if (nd > 300) return x;
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)nd, x);
        return strtod(buf, NULL);
    }
    if (nd < -308) return copysign(0.0, x);
    double p = pow(10.0, (double)-nd), y = x / p, ry = nearbyint(y);
    return ry * p;
}

static int f_round(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                   struct tv *out) {
    CHECK_ARGS("round", "precision", "method");
    int64_t prec = 0;
    const struct tv *m = tpl_arg(a, 1, "method");
    if (int_arg(r, line, tpl_arg(a, 0, "precision"), 0, &prec)) return -1;
    const char *method = m && m->t == TV_STR ? m->u.s->s : "common";
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return tpl_fail(r, line, "method must be common, ceil or floor");
    if (!tv_is_number(v))
        return tpl_fail(r, line, "type %s doesn't define __round__ method", tpl_type_name(v));
    if (!strcmp(method, "common")) {
        if (v->t != TV_FLOAT)
            *out = tv_int(v->u.i); /* round(int, n) stays an int */
        else
            *out = tv_float(py_round(v->u.f, prec));
        return 0;
    }
    double x = v->t == TV_FLOAT ? v->u.f : (double)v->u.i, p = pow(10.0, (double)prec);
    *out = tv_float((method[0] == 'c' ? ceil(x * p) : floor(x * p)) / p);
    return 0;
}

static int f_default(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                     struct tv *out) {
    CHECK_ARGS("default", "default_value", "boolean");
    const struct tv *d = tpl_arg(a, 0, "default_value"), *boolean = tpl_arg(a, 1, "boolean");
    if (v->t == TV_UNDEF || (boolean && tv_truthy(boolean) && !tv_truthy(v))) {
        if (d)
            *out = tv_ref(*d);
        else if (tv_str_new("", 0, out))
            return tpl_oom(r, line);
        return 0;
    }
    *out = tv_ref(*v);
    return 0;
}

static int f_length(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                    struct tv *out) {
    CHECK_NONE("length");
    int64_t n = tv_len(v);
    if (n < 0) return tpl_fail(r, line, "object of type '%s' has no len()", tpl_type_name(v));
    *out = tv_int(n);
    return 0;
}

static int f_tojson(struct tpl_render *r, int line, const struct tv *v, struct tpl_args *a,
                    struct tv *out) {
    CHECK_ARGS("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    const struct tv *ea = tpl_arg(a, 0, "ensure_ascii"), *ind = tpl_arg(a, 1, "indent"),
                    *sep = tpl_arg(a, 2, "separators"), *sk = tpl_arg(a, 3, "sort_keys");
    struct tpl_json_opts o = {.indent = -1, .allow_nan = 1}; /* json.dumps' defaults */
    o.ensure_ascii = ea && tv_truthy(ea);
    o.sort_keys = sk && tv_truthy(sk);
    if (ind && ind->t == TV_STR) {
        o.indent = 0;
        o.indent_str = ind->u.s->s;
    } else if (ind && (ind->t == TV_INT || ind->t == TV_BOOL)) {
        o.indent = ind->u.i < 0 ? 0 : ind->u.i > 1024 ? 1024 : (int)ind->u.i;
    } else if (ind && ind->t != TV_NONE) {
        return tpl_fail(r, line, "tojson indent must be an int or a string");
    }
    if (sep && sep->t != TV_NONE) {
        if (sep->t != TV_LIST || sep->u.l->n != 2 || sep->u.l->v[0].t != TV_STR ||
            sep->u.l->v[1].t != TV_STR)
            return tpl_fail(r, line, "tojson separators must be a pair of strings");
        o.item_sep = sep->u.l->v[0].u.s->s;
        o.key_sep = sep->u.l->v[1].u.s->s;
    }
    struct tpl_buf b = {0};
    int rc = tpl_to_json(r, line, v, &o, &b);
    if (!rc && tv_str_new(b.p ? b.p : "", b.n, out)) rc = tpl_oom(r, line);
    tpl_buf_free(&b);
    return rc;
}

/* ---- table ---- */

static const struct {
    const char *name;
    tpl_filter_fn *fn;
} FILTERS[] = {
    {"abs", f_abs},
    {"attr", tpl_f_attr},
    {"batch", tpl_f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", tpl_f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", tpl_f_first},
    {"float", f_float},
    {"forceescape", f_escape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", tpl_f_items},
    {"join", tpl_f_join},
    {"last", tpl_f_last},
    {"length", f_length},
    {"list", tpl_f_list},
    {"lower", f_lower},
    {"map", tpl_f_map},
    {"max", tpl_f_max},
    {"min", tpl_f_min},
    {"reject", tpl_f_reject},
    {"rejectattr", tpl_f_rejectattr},
    {"replace", f_replace},
    {"reverse", tpl_f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", tpl_f_select},
    {"selectattr", tpl_f_selectattr},
    {"slice", tpl_f_slice},
    {"sort", tpl_f_sort},
    {"string", f_string},
    {"sum", tpl_f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", tpl_f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

int tpl_filter_exists(const char *name) {
    for (size_t i = 0; i < sizeof FILTERS / sizeof *FILTERS; i++)
        if (!strcmp(FILTERS[i].name, name)) return 1;
    return 0;
}

/* jinja2's generator filters raise when they are consumed, not when applied: a failure
 * becomes an (always true) generator that raises the error when iterated. */
static int defer_error(struct tpl_render *r, const char *name, struct tv *out) {
    static const char *const GENERATORS[] = {
        "batch", "slice", "map", "select", "reject", "selectattr", "rejectattr", "unique", "items"};
    int gen = 0;
    for (size_t i = 0; i < sizeof GENERATORS / sizeof *GENERATORS; i++)
        gen |= !strcmp(GENERATORS[i], name);
    if (!gen || r->limit || r->raised) return -1;
    struct tv msg = {0};
    if (tv_str_c(r->err, &msg) || tv_list_new(TL_GEN, 0, out)) {
        tv_drop(&msg);
        return -1;
    }
    out->u.l->err = msg.u.s;
    r->failed = 0;
    r->err[0] = 0;
    return 0;
}

int tpl_filter(struct tpl_render *r, int line, const char *name, const struct tv *v,
               struct tpl_args *a, struct tv *out) {
    for (size_t i = 0; i < sizeof FILTERS / sizeof *FILTERS; i++)
        if (!strcmp(FILTERS[i].name, name))
            return FILTERS[i].fn(r, line, v, a, out) ? defer_error(r, name, out) : 0;
    return tpl_fail(r, line, "the filter '%s' is not supported", name);
}
