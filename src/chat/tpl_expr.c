/* chat/tpl_expr.c: expression evaluation with Python's operator semantics: `/` is true
 * division, `//` and `%` floor toward negative infinity, `+` concatenates strings and lists,
 * `*` repeats them, `~` joins the str() of both sides, comparisons chain, `and`/`or` return
 * an operand. Undefined values raise in arithmetic and ordering but compare unequal, test
 * false and print empty, as jinja2's default Undefined does. */
#include "chat/tpl_impl.h"

#include "chat/tpl_pystr.h"

#include <math.h>
#include <string.h>

const char *tpl_type_name(const struct tv *v) {
    switch (v->t) {
    case TV_UNDEF:
        return "Undefined";
    case TV_NONE:
        return "NoneType";
    case TV_BOOL:
        return "bool";
    case TV_INT:
        return "int";
    case TV_FLOAT:
        return "float";
    case TV_STR:
        return "str";
    case TV_LIST:
        switch (v->u.l->kind) {
        case TL_TUPLE:
            return "tuple";
        case TL_GEN:
            return "generator";
        case TL_RANGE:
            return "range";
        case TL_ITEMS:
            return "dict_items";
        case TL_KEYS:
            return "dict_keys";
        case TL_VALUES:
            return "dict_values";
        default:
            return "list";
        }
    case TV_DICT:
        return v->u.d->kind == TD_NS ? "Namespace" : "dict";
    case TV_FUNC:
        return v->u.fn->kind == FN_MACRO ? "Macro" : "function";
    case TV_LOOP:
        return "LoopContext";
    default:
        return "object";
    }
}

int tpl_undefined_error(struct tpl_render *r, int line, const struct tv *u) {
    if (u->u.hint) return tpl_fail(r, line, "'%s' is undefined", u->u.hint);
    return tpl_fail(r, line, "an undefined value was used");
}

static int int_like(const struct tv *v) {
    return v->t == TV_INT || v->t == TV_BOOL;
}

static int repeat(struct tpl_render *r, int line, const struct tv *seq, int64_t times,
                  struct tv *out) {
    if (times < 0) times = 0;
    if (seq->t == TV_STR) {
        size_t len = seq->u.s->len;
        if (len && (uint64_t)times > r->max_output / len)
            return tpl_limit(r, line, "string repetition too large");
        if (tpl_step(r, line, (uint64_t)times * len / 64)) return -1;
        struct tpl_buf b = {0};
        for (int64_t i = 0; i < times; i++)
            if (tpl_buf_put(r, &b, seq->u.s->s, len)) return tpl_buf_free(&b), -1;
        int rc = tv_str_new(b.p ? b.p : "", b.n, out);
        tpl_buf_free(&b);
        return rc ? tpl_oom(r, line) : 0;
    }
    const struct tv_list *l = seq->u.l;
    if (l->n && (uint64_t)times > (r->max_output / 16) / l->n)
        return tpl_limit(r, line, "list repetition too large");
    if (tpl_step(r, line, (uint64_t)times * l->n) ||
        tv_list_new(l->kind == TL_TUPLE ? TL_TUPLE : TL_LIST, (size_t)times * l->n, out))
        return r->failed ? -1 : tpl_oom(r, line);
    for (int64_t i = 0; i < times; i++)
        for (size_t j = 0; j < l->n; j++)
            if (tv_list_push(out, tv_ref(l->v[j]))) return tv_drop(out), tpl_oom(r, line);
    return 0;
}

static int type_error(struct tpl_render *r, int line, const char *op, const struct tv *a,
                      const struct tv *b) {
    return tpl_fail(r, line, "unsupported operand type(s) for %s: '%s' and '%s'", op,
                    tpl_type_name(a), tpl_type_name(b));
}

static int int_arith(struct tpl_render *r, int line, int op, int64_t x, int64_t y, struct tv *out) {
    int64_t z = 0;
    int ovf = 0;
    switch (op) {
    case OP_ADD:
        ovf = __builtin_add_overflow(x, y, &z);
        break;
    case OP_SUB:
        ovf = __builtin_sub_overflow(x, y, &z);
        break;
    case OP_MUL:
        ovf = __builtin_mul_overflow(x, y, &z);
        break;
    case OP_FLOORDIV:
    case OP_MOD:
        if (y == 0) return tpl_fail(r, line, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) {
            ovf = op == OP_FLOORDIV;
            z = 0;
            break;
        }
        if (op == OP_FLOORDIV) {
            z = x / y;
            if (x % y != 0 && ((x < 0) != (y < 0))) z--;
        } else {
            z = x % y;
            if (z != 0 && ((z < 0) != (y < 0))) z += y;
        }
        break;
    case OP_POW:
        if (y < 0) {
            if (x == 0) return tpl_fail(r, line, "0.0 cannot be raised to a negative power");
            *out = tv_float(pow((double)x, (double)y));
            return 0;
        }
        z = 1;
        for (int64_t base = x, e = y; e && !ovf; e >>= 1) {
            if (e & 1) ovf |= __builtin_mul_overflow(z, base, &z);
            if (e > 1) ovf |= __builtin_mul_overflow(base, base, &base);
        }
        break;
    default:
        return tpl_fail(r, line, "internal error: int operator");
    }
    if (ovf) return tpl_fail(r, line, "integer overflow");
    *out = tv_int(z);
    return 0;
}

static int float_arith(struct tpl_render *r, int line, int op, double x, double y, struct tv *out) {
    double z;
    switch (op) {
    case OP_ADD:
        z = x + y;
        break;
    case OP_SUB:
        z = x - y;
        break;
    case OP_MUL:
        z = x * y;
        break;
    case OP_DIV:
        if (y == 0) return tpl_fail(r, line, "division by zero");
        z = x / y;
        break;
    case OP_FLOORDIV:
    case OP_MOD: {
        if (y == 0) return tpl_fail(r, line, "float divmod by zero");
        double m = fmod(x, y);
        double d = (x - m) / y;
        if (m != 0 && ((y < 0) != (m < 0))) {
            m += y;
            d -= 1.0;
        }
        if (m == 0) m = copysign(0.0, y);
        double fd = d != 0 ? floor(d) : copysign(0.0, x / y);
        if (d != 0 && d - fd > 0.5) fd += 1.0;
        z = op == OP_MOD ? m : fd;
        break;
    }
    case OP_POW:
        if (x == 0 && y < 0) return tpl_fail(r, line, "0.0 cannot be raised to a negative power");
        if (x < 0 && y != floor(y))
            return tpl_fail(r, line, "a negative number to a fractional power is complex");
        z = pow(x, y);
        if (isinf(z) && isfinite(x) && isfinite(y))
            return tpl_fail(r, line, "numerical result out of range");
        break;
    default:
        return tpl_fail(r, line, "internal error: float operator");
    }
    *out = tv_float(z);
    return 0;
}

int tpl_binop(struct tpl_render *r, int line, int op, const struct tv *a, const struct tv *b,
              struct tv *out) {
    static const char *const sym[] = {
        [OP_ADD] = "+",       [OP_SUB] = "-", [OP_MUL] = "*",          [OP_DIV] = "/",
        [OP_FLOORDIV] = "//", [OP_MOD] = "%", [OP_POW] = "** or pow()"};
    if (op == OP_TILDE) {
        struct tpl_buf buf = {0};
        int rc = tpl_to_str(r, a, &buf) || tpl_to_str(r, b, &buf) ? -1 : 0;
        if (!rc && tv_str_new(buf.p ? buf.p : "", buf.n, out)) rc = tpl_oom(r, line);
        tpl_buf_free(&buf);
        return rc;
    }
    if (a->t == TV_UNDEF) return tpl_undefined_error(r, line, a);
    if (b->t == TV_UNDEF) return tpl_undefined_error(r, line, b);
    if (tv_is_number(a) && tv_is_number(b)) {
        if (int_like(a) && int_like(b) && op != OP_DIV)
            return int_arith(r, line, op, a->u.i, b->u.i, out);
        double x = a->t == TV_FLOAT ? a->u.f : (double)a->u.i,
               y = b->t == TV_FLOAT ? b->u.f : (double)b->u.i;
        return float_arith(r, line, op, x, y, out);
    }
    if (op == OP_ADD && a->t == TV_STR && b->t == TV_STR) {
        if (!a->u.s->markup && !b->u.s->markup)
            return tv_str_cat(a->u.s, b->u.s, out) ? tpl_oom(r, line) : 0;
        /* Markup + str escapes the plain side (jinja2's Markup.__add__ / __radd__) */
        struct tv ea, eb;
        if (tpl_escape_str(r, a, &ea)) return -1;
        if (tpl_escape_str(r, b, &eb)) return tv_drop(&ea), -1;
        int rc = tv_str_cat(ea.u.s, eb.u.s, out) ? tpl_oom(r, line) : 0;
        if (!rc) out->u.s->markup = 1;
        tv_drop(&ea);
        tv_drop(&eb);
        return rc;
    }
    if (op == OP_ADD && a->t == TV_LIST && b->t == TV_LIST && a->u.l->kind != TL_GEN &&
        b->u.l->kind != TL_GEN && (a->u.l->kind == TL_TUPLE) == (b->u.l->kind == TL_TUPLE)) {
        const struct tv_list *x = a->u.l, *y = b->u.l;
        if (tpl_step(r, line, x->n + y->n)) return -1;
        if (tv_list_new(x->kind == TL_TUPLE ? TL_TUPLE : TL_LIST, x->n + y->n, out))
            return tpl_oom(r, line);
        for (size_t i = 0; i < x->n + y->n; i++)
            if (tv_list_push(out, tv_ref(i < x->n ? x->v[i] : y->v[i - x->n])))
                return tv_drop(out), tpl_oom(r, line);
        if (tv_depth(out) > TV_MAX_DEPTH)
            return tv_drop(out), tpl_fail(r, line, "values nested too deeply");
        return 0;
    }
    if (op == OP_MUL) {
        const struct tv *seq = a->t == TV_STR || a->t == TV_LIST ? a : b, *k = seq == a ? b : a;
        if ((seq->t == TV_STR || (seq->t == TV_LIST && seq->u.l->kind != TL_GEN)) && int_like(k))
            return repeat(r, line, seq, k->u.i, out);
    }
    if (op == OP_MOD && a->t == TV_STR) return tpl_percent_format(r, line, a->u.s, b, out);
    return type_error(r, line, (size_t)op < sizeof sym / sizeof *sym && sym[op] ? sym[op] : "?", a,
                      b);
}

/* Python's `a in b`. */
int tpl_contains(struct tpl_render *r, int line, const struct tv *item, const struct tv *c,
                 int *out) {
    *out = 0;
    switch (c->t) {
    case TV_UNDEF:
        return 0;
    case TV_STR:
        if (item->t != TV_STR)
            return tpl_fail(r, line, "'in <string>' requires string as left operand, not %s",
                            tpl_type_name(item));
        if (tpl_step(r, line, c->u.s->len / 64)) return -1;
        *out = item->u.s->len == 0 ||
               memmem(c->u.s->s, c->u.s->len, item->u.s->s, item->u.s->len) != NULL;
        return 0;
    case TV_LIST:
        if (c->u.l->err) return tpl_fail(r, line, "%s", c->u.l->err->s);
        if (tpl_step(r, line, c->u.l->n)) return -1;
        for (size_t i = 0; i < c->u.l->n && !*out; i++) {
            const struct tv *e = &c->u.l->v[i];
            if (c->u.l->kind == TL_ITEMS && e->t == TV_LIST)
                *out = tv_equal(e, item);
            else
                *out = tv_equal(e, item);
        }
        return 0;
    case TV_DICT:
        if (c->u.d->kind == TD_NS) break;
        if (!tv_hashable(item))
            return tpl_fail(r, line, "unhashable type: '%s'", tpl_type_name(item));
        *out = tv_dict_get(c->u.d, item) != NULL;
        return 0;
    case TV_LOOP: {
        struct tv items = tv_ref(c->u.loop->items);
        int rc = tpl_contains(r, line, item, &items, out);
        tv_drop(&items);
        return rc;
    }
    default:
        break;
    }
    return tpl_fail(r, line, "argument of type '%s' is not iterable", tpl_type_name(c));
}

static int compare(struct tpl_render *r, int line, int op, const struct tv *a, const struct tv *b,
                   int *res) {
    static const char *const sym[] = {[OP_LT] = "<", [OP_LE] = "<=", [OP_GT] = ">", [OP_GE] = ">="};
    switch (op) {
    case OP_EQ:
        *res = tv_equal(a, b);
        return 0;
    case OP_NE:
        *res = !tv_equal(a, b);
        return 0;
    case OP_IN:
    case OP_NOTIN:
        if (tpl_contains(r, line, a, b, res)) return -1;
        if (op == OP_NOTIN) *res = !*res;
        return 0;
    default:
        break;
    }
    if (a->t == TV_UNDEF) return tpl_undefined_error(r, line, a);
    if (b->t == TV_UNDEF) return tpl_undefined_error(r, line, b);
    int lt;
    const struct tv *x = op == OP_GT || op == OP_LE ? b : a, *y = x == a ? b : a;
    if (tv_less(x, y, &lt))
        return tpl_fail(r, line, "'%s' not supported between instances of '%s' and '%s'", sym[op],
                        tpl_type_name(a), tpl_type_name(b));
    /* LT: a<b   GT: b<a   LE: !(b<a)   GE: !(a<b) */
    *res = op == OP_LT || op == OP_GT ? lt : !lt;
    return 0;
}

static int eval_seq(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
                    struct tv *out) {
    if (tv_list_new(n->kind == ND_TUPLE ? TL_TUPLE : TL_LIST, n->n_items, out))
        return tpl_oom(r, n->line);
    for (size_t i = 0; i < n->n_items; i++) {
        struct tv v;
        if (tpl_eval(r, s, n->items[i], &v)) return tv_drop(out), -1;
        if (tv_list_push(out, v)) return tv_drop(out), tpl_oom(r, n->line);
    }
    if (tv_depth(out) > TV_MAX_DEPTH)
        return tv_drop(out), tpl_fail(r, n->line, "values nested too deeply");
    return 0;
}

static int eval_dict(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
                     struct tv *out) {
    if (tv_dict_new(TD_DICT, n->n_items, out)) return tpl_oom(r, n->line);
    for (size_t i = 0; i < n->n_items; i++) {
        struct tv k, v;
        int bad;
        if (tpl_eval(r, s, n->items[i], &k)) return tv_drop(out), -1;
        if (tpl_eval(r, s, n->items2[i], &v)) return tv_drop(&k), tv_drop(out), -1;
        const char *tn = tpl_type_name(&k);
        if (tv_dict_set(out, k, v, &bad)) {
            tv_drop(out);
            return bad ? tpl_fail(r, n->line, "unhashable type: '%s'", tn) : tpl_oom(r, n->line);
        }
    }
    if (tv_depth(out) > TV_MAX_DEPTH)
        return tv_drop(out), tpl_fail(r, n->line, "values nested too deeply");
    return 0;
}

static int eval_getitem(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
                        struct tv *out) {
    struct tv obj, key;
    if (tpl_eval(r, s, n->a, &obj)) return -1;
    int rc;
    if (n->b->kind == ND_SLICE) {
        struct tv b[3] = {tv_none(), tv_none(), tv_none()};
        const struct tpl_node *parts[3] = {n->b->b, n->b->c, n->b->d};
        rc = 0;
        for (int i = 0; i < 3 && !rc; i++)
            if (parts[i]) rc = tpl_eval(r, s, parts[i], &b[i]);
        if (!rc) rc = tpl_slice(r, n->line, &obj, b, out);
        for (int i = 0; i < 3; i++) tv_drop(&b[i]);
    } else {
        rc = tpl_eval(r, s, n->b, &key);
        if (!rc) {
            rc = tpl_getitem(r, n->line, &obj, &key, out);
            tv_drop(&key);
        }
    }
    tv_drop(&obj);
    return rc;
}

static int eval_call(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
                     struct tv *out) {
    struct tv fn = {0};
    struct tpl_args a = {0};
    int rc;
    if (n->a->kind == ND_GETATTR) { /* obj.method(...) without building a bound method */
        struct tv obj;
        if (tpl_eval(r, s, n->a->a, &obj)) return -1;
        if (tpl_has_method(&obj, n->a->name)) {
            rc = tpl_eval_args(r, s, n, &a);
            if (!rc) rc = tpl_method(r, n->line, &obj, n->a->name, &a, out);
            tpl_args_free(&a);
            tv_drop(&obj);
            return rc;
        }
        rc = tpl_getattr(r, n->line, &obj, n->a->name, &fn);
        tv_drop(&obj);
    } else {
        rc = tpl_eval(r, s, n->a, &fn);
    }
    if (!rc) rc = tpl_eval_args(r, s, n, &a);
    if (!rc) rc = tpl_call_value(r, n->line, &fn, &a, out);
    tpl_args_free(&a);
    tv_drop(&fn);
    return rc;
}

static int eval_filter_or_test(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
                               struct tv *out) {
    struct tv v;
    struct tpl_args a = {0};
    if (tpl_eval(r, s, n->a, &v)) return -1;
    int rc = tpl_eval_args(r, s, n, &a);
    if (!rc && n->kind == ND_FILTER) {
        rc = tpl_filter(r, n->line, n->name, &v, &a, out);
    } else if (!rc) {
        int res = 0;
        rc = tpl_test(r, n->line, n->name, &v, &a, &res);
        *out = tv_bool(n->flags ? !res : res);
    }
    tpl_args_free(&a);
    tv_drop(&v);
    return rc;
}

int tpl_eval_with_input(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
                        const struct tv *input, struct tv *out) {
    const struct tv *saved = r->input;
    r->input = input;
    int rc = tpl_eval(r, s, n, out);
    r->input = saved;
    return rc;
}

static int eval_node(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
                     struct tv *out);

int tpl_eval(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n, struct tv *out) {
    if (++r->nest > TPL_MAX_NEST) {
        r->nest--;
        return tpl_limit(r, n->line,
                         "the template nests too deeply (expressions, blocks and macro calls)");
    }
    int rc = eval_node(r, s, n, out);
    r->nest--;
    return rc;
}

static int eval_node(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
                     struct tv *out) {
    if (tpl_step(r, n->line, 1)) return -1;
    struct tv a, b;
    int rc, res;
    switch (n->kind) {
    case ND_CONST:
        *out = tv_ref(n->value);
        return 0;
    case ND_NAME: {
        const struct tv *v = tpl_scope_find(r, s, n->name);
        if (v) {
            *out = tv_ref(*v);
            return 0;
        }
        if (tpl_is_builtin(n->name)) return tpl_func_new(r, FN_BUILTIN, n->name, out);
        *out = tv_undef(n->name);
        return 0;
    }
    case ND_INPUT:
        *out = r->input ? tv_ref(*r->input) : tv_undef(NULL);
        return 0;
    case ND_LIST:
    case ND_TUPLE:
        return eval_seq(r, s, n, out);
    case ND_DICT:
        return eval_dict(r, s, n, out);
    case ND_GETATTR:
        if (tpl_eval(r, s, n->a, &a)) return -1;
        rc = tpl_getattr(r, n->line, &a, n->name, out);
        tv_drop(&a);
        return rc;
    case ND_GETITEM:
        return eval_getitem(r, s, n, out);
    case ND_CALL:
        return eval_call(r, s, n, out);
    case ND_FILTER:
    case ND_TEST:
        return eval_filter_or_test(r, s, n, out);
    case ND_NOT:
        if (tpl_eval(r, s, n->a, &a)) return -1;
        *out = tv_bool(!tv_truthy(&a));
        tv_drop(&a);
        return 0;
    case ND_NEG:
    case ND_POS:
        if (tpl_eval(r, s, n->a, &a)) return -1;
        rc = 0;
        if (a.t == TV_UNDEF)
            rc = tpl_undefined_error(r, n->line, &a);
        else if (a.t == TV_FLOAT)
            *out = tv_float(n->kind == ND_NEG ? -a.u.f : a.u.f);
        else if (int_like(&a) && n->kind == ND_POS)
            *out = tv_int(a.u.i);
        else if (int_like(&a) && a.u.i != INT64_MIN)
            *out = tv_int(-a.u.i);
        else if (int_like(&a))
            rc = tpl_fail(r, n->line, "integer overflow");
        else
            rc = tpl_fail(r, n->line, "bad operand type for unary %s: '%s'",
                          n->kind == ND_NEG ? "-" : "+", tpl_type_name(&a));
        tv_drop(&a);
        return rc;
    case ND_BINOP:
        if (tpl_eval(r, s, n->a, &a)) return -1;
        if (tpl_eval(r, s, n->b, &b)) return tv_drop(&a), -1;
        rc = tpl_binop(r, n->line, n->op, &a, &b, out);
        tv_drop(&a);
        tv_drop(&b);
        return rc;
    case ND_AND:
    case ND_OR:
        if (tpl_eval(r, s, n->a, &a)) return -1;
        if (tv_truthy(&a) == (n->kind == ND_OR)) {
            *out = a;
            return 0;
        }
        tv_drop(&a);
        return tpl_eval(r, s, n->b, out);
    case ND_COMPARE:
        if (tpl_eval(r, s, n->a, &a)) return -1;
        res = 1;
        for (size_t i = 0; i < n->n_items && res; i++) {
            if (tpl_eval(r, s, n->items[i], &b)) return tv_drop(&a), -1;
            rc = compare(r, n->line, n->ops[i], &a, &b, &res);
            tv_drop(&a);
            a = b;
            if (rc) return tv_drop(&a), -1;
        }
        tv_drop(&a);
        *out = tv_bool(res);
        return 0;
    case ND_COND:
        if (tpl_eval(r, s, n->a, &a)) return -1;
        res = tv_truthy(&a);
        tv_drop(&a);
        if (res) return tpl_eval(r, s, n->b, out);
        if (n->c) return tpl_eval(r, s, n->c, out);
        *out = tv_undef(NULL);
        return 0;
    default:
        return tpl_fail(r, n->line, "internal error: expression kind %d", n->kind);
    }
}
