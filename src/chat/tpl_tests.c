/* chat/tpl_tests.c: jinja2's tests (`x is defined`, `x is string`, `n is divisibleby 3`, ...)
 * with Python's type rules: booleans are numbers but not integers, dicts and strings are
 * sequences, undefined is iterable and a sequence, generators are iterable but not
 * sequences. An unknown test name is an error when it runs, as in jinja2. */
#include "chat/tpl_impl.h"

#include "chat/tpl_pystr.h"

#include <string.h>
#include <utf8proc.h>

static const struct tv *arg1(struct tpl_render *r, int line, const char *name, struct tpl_args *a) {
    const struct tv *v = a->n ? &a->pos[0] : a->n_kw ? &a->kwv[0] : NULL;
    if (!v) tpl_fail(r, line, "the test '%s' needs an argument", name);
    return v;
}

static int case_test(const struct tv *v, int upper) {
    if (v->t != TV_STR) return 0;
    int cased = 0;
    for (size_t i = 0; i < v->u.s->len;) {
        utf8proc_int32_t c = (utf8proc_int32_t)tpl_utf8_next(v->u.s->s, &i);
        if (upper ? utf8proc_islower(c) : utf8proc_isupper(c)) return 0;
        if (utf8proc_category(c) == UTF8PROC_CATEGORY_LT) return 0;
        cased |= upper ? utf8proc_isupper(c) : utf8proc_islower(c);
    }
    return cased;
}

static int mod2(struct tpl_render *r, int line, const struct tv *v, int want) {
    if (v->t == TV_UNDEF) return tpl_undefined_error(r, line, v);
    if (v->t == TV_BOOL || v->t == TV_INT) return ((v->u.i % 2) + 2) % 2 == want;
    if (v->t == TV_FLOAT) {
        struct tv two = tv_int(2), m;
        if (tpl_binop(r, line, OP_MOD, v, &two, &m)) return -1;
        return m.u.f == (double)want;
    }
    if (v->t == TV_STR)
        return tpl_fail(r, line, "not all arguments converted during string formatting");
    return tpl_fail(r, line, "unsupported operand type(s) for %%: '%s' and 'int'",
                    tpl_type_name(v));
}

static const char *const TESTS[] = {
    "odd",      "even",        "divisibleby", "defined", "undefined", "none",   "boolean",
    "false",    "true",        "integer",     "float",   "number",    "string", "mapping",
    "sequence", "iterable",    "callable",    "sameas",  "escaped",   "lower",  "upper",
    "in",       "==",          "eq",          "equalto", "!=",        "ne",     ">",
    "gt",       "greaterthan", ">=",          "ge",      "<",         "lt",     "lessthan",
    "<=",       "le",          "filter",      "test",
};

int tpl_test_exists(const char *name) {
    for (size_t i = 0; i < sizeof TESTS / sizeof *TESTS; i++)
        if (!strcmp(TESTS[i], name)) return 1;
    return 0;
}

static int is(const char *name, const char *a, const char *b, const char *c) {
    return !strcmp(name, a) || (b && !strcmp(name, b)) || (c && !strcmp(name, c));
}

int tpl_test(struct tpl_render *r, int line, const char *name, const struct tv *v,
             struct tpl_args *a, int *out) {
    int t = v->t;
    *out = 0;
    if (is(name, "defined", NULL, NULL)) return *out = t != TV_UNDEF, 0;
    if (is(name, "undefined", NULL, NULL)) return *out = t == TV_UNDEF, 0;
    if (is(name, "none", NULL, NULL)) return *out = t == TV_NONE, 0;
    if (is(name, "boolean", NULL, NULL)) return *out = t == TV_BOOL, 0;
    if (is(name, "true", NULL, NULL)) return *out = t == TV_BOOL && v->u.i, 0;
    if (is(name, "false", NULL, NULL)) return *out = t == TV_BOOL && !v->u.i, 0;
    if (is(name, "integer", NULL, NULL)) return *out = t == TV_INT, 0;
    if (is(name, "float", NULL, NULL)) return *out = t == TV_FLOAT, 0;
    if (is(name, "number", NULL, NULL)) return *out = tv_is_number(v), 0;
    if (is(name, "string", NULL, NULL)) return *out = t == TV_STR, 0;
    if (is(name, "mapping", NULL, NULL)) return *out = t == TV_DICT && v->u.d->kind == TD_DICT, 0;
    if (is(name, "escaped", NULL, NULL)) return *out = t == TV_STR && v->u.s->markup, 0;
    if (is(name, "callable", NULL, NULL))
        return *out = t == TV_FUNC || t == TV_LOOP || t == TV_UNDEF, 0;
    if (is(name, "iterable", NULL, NULL))
        return *out = t == TV_UNDEF || t == TV_STR || t == TV_LIST || t == TV_LOOP ||
                      (t == TV_DICT && v->u.d->kind == TD_DICT),
               0;
    if (is(name, "sequence", NULL, NULL))
        return *out = t == TV_UNDEF || t == TV_STR ||
                      (t == TV_LIST && (v->u.l->kind == TL_LIST || v->u.l->kind == TL_TUPLE ||
                                        v->u.l->kind == TL_RANGE)) ||
                      (t == TV_DICT && v->u.d->kind == TD_DICT),
               0;
    if (is(name, "lower", NULL, NULL) || is(name, "upper", NULL, NULL)) {
        struct tv s;
        if (tpl_str_value(r, v, &s)) return -1;
        *out = case_test(&s, name[0] == 'u');
        tv_drop(&s);
        return 0;
    }
    if (is(name, "odd", "even", NULL)) {
        int rc = mod2(r, line, v, name[0] == 'o');
        if (rc < 0) return -1;
        *out = rc;
        return 0;
    }
    if (is(name, "filter", "test", NULL)) {
        *out = t == TV_STR &&
               (name[0] == 'f' ? tpl_filter_exists(v->u.s->s) : tpl_test_exists(v->u.s->s));
        return 0;
    }
    if (!tpl_test_exists(name)) return tpl_fail(r, line, "no test named '%s'", name);
    const struct tv *o = arg1(r, line, name, a);
    if (!o) return -1;
    if (is(name, "divisibleby", NULL, NULL)) {
        struct tv m;
        if (tpl_binop(r, line, OP_MOD, v, o, &m)) return -1;
        *out = (m.t == TV_INT && m.u.i == 0) || (m.t == TV_FLOAT && m.u.f == 0.0);
        tv_drop(&m);
        return 0;
    }
    if (is(name, "sameas", NULL, NULL)) {
        if (t != o->t) return 0;
        if (t == TV_STR)
            *out = v->u.s == o->u.s;
        else if (t == TV_LIST)
            *out = v->u.l == o->u.l;
        else if (t == TV_DICT)
            *out = v->u.d == o->u.d;
        else
            *out = tv_equal(v, o);
        return 0;
    }
    if (is(name, "in", NULL, NULL)) return tpl_contains(r, line, v, o, out);
    if (is(name, "==", "eq", "equalto")) return *out = tv_equal(v, o), 0;
    if (is(name, "!=", "ne", NULL)) return *out = !tv_equal(v, o), 0;
    const struct tv *x = v, *y = o;
    int strict = is(name, ">", "gt", "greaterthan") || is(name, "<", "lt", "lessthan");
    if (is(name, ">", "gt", "greaterthan") || is(name, "<=", "le", NULL)) x = o, y = v;
    if (x->t == TV_UNDEF) return tpl_undefined_error(r, line, x);
    if (y->t == TV_UNDEF) return tpl_undefined_error(r, line, y);
    int lt;
    if (tv_less(x, y, &lt))
        return tpl_fail(r, line, "comparison not supported between instances of '%s' and '%s'",
                        tpl_type_name(v), tpl_type_name(o));
    /* gt: o<v   lt: v<o   le: !(o<v)   ge: !(v<o) */
    *out = strict ? lt : !lt;
    return 0;
}
