/* chat/tpl_parse_expr.c: expressions, from jinja2's grammar:
 *   condexpr: or ('if' or ('else' condexpr)?)*     or: and ('or' and)*     and: not ('and' not)*
 *   not: 'not' not | compare                        compare: math1 (cmp math1)*
 *   math1: concat (('+'|'-') concat)*               concat: math2 ('~' math2)*
 *   math2: pow (('*'|'/'|'//'|'%') pow)*            pow: unary ('**' unary)*
 *   unary: ('-'|'+') unary | primary postfix* then filters, tests and calls (filter_expr)
 * Node roles: GETATTR a.name; GETITEM a[b] (b may be a SLICE b:c:d); CALL a(items, kw, *dyn);
 * FILTER/TEST a|name(args); BINOP a op b; COMPARE a (ops[i] items[i])*; COND b if a else c. */
#include "chat/tpl_parse.h"

#include <string.h>

static struct tpl_node *parse_unary(struct tpl_parser *p, int with_filter);
static struct tpl_node *parse_postfix_one(struct tpl_parser *p, struct tpl_node *node);

static int enter(struct tpl_parser *p) {
    if (++p->depth > TPL_MAX_NESTING) {
        tpl_pfail(p, tpl_cur(p), "expression nested too deeply");
        return -1;
    }
    return 0;
}

struct tpl_node *tpl_parse_expression(struct tpl_parser *p, int with_condexpr);
static struct tpl_node *parse_or(struct tpl_parser *p);

static struct tpl_node *parse_condexpr(struct tpl_parser *p) {
    struct tpl_node *e1 = parse_or(p);
    while (e1 && tpl_is_name(tpl_cur(p), "if")) {
        const struct tpl_token *at = tpl_cur(p);
        p->i++;
        struct tpl_node *c = tpl_pnode(p, ND_COND, at);
        if (!c || !(c->a = parse_or(p))) return NULL;
        c->b = e1;
        if (tpl_is_name(tpl_cur(p), "else")) {
            p->i++;
            if (enter(p)) return NULL;
            c->c = parse_condexpr(p);
            p->depth--;
            if (!c->c) return NULL;
        }
        e1 = c;
    }
    return e1;
}

static struct tpl_node *binary(struct tpl_parser *p, int kind, int op, const struct tpl_token *at,
                               struct tpl_node *a, struct tpl_node *b) {
    if (!a || !b) return NULL;
    struct tpl_node *n = tpl_pnode(p, kind, at);
    if (!n) return NULL;
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static struct tpl_node *parse_not(struct tpl_parser *p);

static struct tpl_node *parse_and(struct tpl_parser *p) {
    struct tpl_node *l = parse_not(p);
    while (l && tpl_is_name(tpl_cur(p), "and")) {
        const struct tpl_token *at = tpl_cur(p);
        p->i++;
        l = binary(p, ND_AND, 0, at, l, parse_not(p));
    }
    return l;
}

static struct tpl_node *parse_or(struct tpl_parser *p) {
    struct tpl_node *l = parse_and(p);
    while (l && tpl_is_name(tpl_cur(p), "or")) {
        const struct tpl_token *at = tpl_cur(p);
        p->i++;
        l = binary(p, ND_OR, 0, at, l, parse_and(p));
    }
    return l;
}

static struct tpl_node *parse_math1(struct tpl_parser *p);

static struct tpl_node *parse_compare(struct tpl_parser *p) {
    const struct tpl_token *at = tpl_cur(p);
    struct tpl_node *e = parse_math1(p);
    if (!e) return NULL;
    struct tpl_node *items[64];
    uint8_t ops[64];
    size_t n = 0;
    while (1) {
        const struct tpl_token *t = tpl_cur(p);
        int op = 0;
        if (t->type == TK_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT ||
                                 t->op == OP_LE || t->op == OP_GT || t->op == OP_GE)) {
            op = t->op;
            p->i++;
        } else if (tpl_is_name(t, "in")) {
            op = OP_IN;
            p->i++;
        } else if (tpl_is_name(t, "not") && tpl_is_name(tpl_look(p), "in")) {
            op = OP_NOTIN;
            p->i += 2;
        } else {
            break;
        }
        if (n == 64) return tpl_pfail(p, t, "too many chained comparisons"), NULL;
        ops[n] = (uint8_t)op;
        if (!(items[n++] = parse_math1(p))) return NULL;
    }
    if (!n) return e;
    struct tpl_node *c = tpl_pnode(p, ND_COMPARE, at);
    if (!c) return NULL;
    c->a = e;
    c->items = tpl_arena_alloc(p->a, n * sizeof *c->items);
    c->ops = tpl_arena_alloc(p->a, n);
    if (!c->items || !c->ops) return tpl_pfail(p, at, "out of memory"), NULL;
    memcpy(c->items, items, n * sizeof *items);
    memcpy(c->ops, ops, n);
    c->n_items = n;
    return c;
}

static struct tpl_node *parse_not(struct tpl_parser *p) {
    if (!tpl_is_name(tpl_cur(p), "not")) return parse_compare(p);
    const struct tpl_token *at = tpl_cur(p);
    p->i++;
    if (enter(p)) return NULL;
    struct tpl_node *a = parse_not(p);
    p->depth--;
    if (!a) return NULL;
    struct tpl_node *n = tpl_pnode(p, ND_NOT, at);
    if (n) n->a = a;
    return n;
}

static struct tpl_node *parse_pow(struct tpl_parser *p) {
    struct tpl_node *l = parse_unary(p, 1);
    while (l && tpl_is_op(tpl_cur(p), OP_POW)) {
        const struct tpl_token *at = tpl_cur(p);
        p->i++;
        l = binary(p, ND_BINOP, OP_POW, at, l, parse_unary(p, 1));
    }
    return l;
}

static struct tpl_node *parse_math2(struct tpl_parser *p) {
    struct tpl_node *l = parse_pow(p);
    while (l) {
        const struct tpl_token *t = tpl_cur(p);
        if (t->type != TK_OP ||
            !(t->op == OP_MUL || t->op == OP_DIV || t->op == OP_FLOORDIV || t->op == OP_MOD))
            break;
        p->i++;
        l = binary(p, ND_BINOP, t->op, t, l, parse_pow(p));
    }
    return l;
}

static struct tpl_node *parse_concat(struct tpl_parser *p) {
    struct tpl_node *l = parse_math2(p);
    while (l && tpl_is_op(tpl_cur(p), OP_TILDE)) {
        const struct tpl_token *at = tpl_cur(p);
        p->i++;
        l = binary(p, ND_BINOP, OP_TILDE, at, l, parse_math2(p));
    }
    return l;
}

static struct tpl_node *parse_math1(struct tpl_parser *p) {
    struct tpl_node *l = parse_concat(p);
    while (l) {
        const struct tpl_token *t = tpl_cur(p);
        if (t->type != TK_OP || !(t->op == OP_ADD || t->op == OP_SUB)) break;
        p->i++;
        l = binary(p, ND_BINOP, t->op, t, l, parse_concat(p));
    }
    return l;
}

struct tpl_node *tpl_parse_expression(struct tpl_parser *p, int with_condexpr) {
    if (enter(p)) return NULL;
    struct tpl_node *n = with_condexpr ? parse_condexpr(p) : parse_or(p);
    p->depth--;
    return n;
}

/* ---- primary, postfix, filters ---- */

static int is_tuple_end(struct tpl_parser *p, const char *extra_end) {
    const struct tpl_token *t = tpl_cur(p);
    if (t->type == TK_VAR_END || t->type == TK_BLOCK_END || t->type == TK_EOF) return 1;
    if (tpl_is_op(t, OP_RPAREN)) return 1;
    return extra_end && tpl_is_name(t, extra_end);
}

static int push(struct tpl_parser *p, struct tpl_node ***v, size_t *n, size_t *cap,
                struct tpl_node *x) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 4;
        struct tpl_node **nv = tpl_arena_alloc(p->a, nc * sizeof *nv);
        if (!nv) return tpl_pfail(p, tpl_cur(p), "out of memory");
        if (*n) memcpy(nv, *v, *n * sizeof *nv);
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = x;
    return 0;
}

struct tpl_node *tpl_parse_tuple(struct tpl_parser *p, int simplified, int with_condexpr,
                                 const char *extra_end, int explicit_parens) {
    const struct tpl_token *at = tpl_cur(p);
    struct tpl_node **items = NULL;
    size_t n = 0, cap = 0;
    int is_tuple = 0;
    while (1) {
        if (n && tpl_expect_op(p, OP_COMMA)) return NULL;
        if (is_tuple_end(p, extra_end)) break;
        struct tpl_node *e =
            simplified ? tpl_parse_primary(p) : tpl_parse_expression(p, with_condexpr);
        if (!e || push(p, &items, &n, &cap, e)) return NULL;
        if (!tpl_is_op(tpl_cur(p), OP_COMMA)) break;
        is_tuple = 1;
    }
    if (!is_tuple) {
        if (n) return items[0];
        if (!explicit_parens) return tpl_pfail(p, tpl_cur(p), "expected an expression"), NULL;
    }
    struct tpl_node *t = tpl_pnode(p, ND_TUPLE, at);
    if (!t) return NULL;
    t->items = items;
    t->n_items = n;
    return t;
}

static struct tpl_node *parse_list(struct tpl_parser *p) {
    struct tpl_node *l = tpl_pnode(p, ND_LIST, tpl_cur(p));
    size_t cap = 0;
    if (!l || tpl_expect_op(p, OP_LBRACKET)) return NULL;
    while (!tpl_is_op(tpl_cur(p), OP_RBRACKET)) {
        if (l->n_items && tpl_expect_op(p, OP_COMMA)) return NULL;
        if (tpl_is_op(tpl_cur(p), OP_RBRACKET)) break;
        struct tpl_node *e = tpl_parse_expression(p, 1);
        if (!e || push(p, &l->items, &l->n_items, &cap, e)) return NULL;
    }
    return tpl_expect_op(p, OP_RBRACKET) ? NULL : l;
}

static struct tpl_node *parse_dict(struct tpl_parser *p) {
    struct tpl_node *d = tpl_pnode(p, ND_DICT, tpl_cur(p));
    size_t cap = 0, cap2 = 0, n2 = 0;
    if (!d || tpl_expect_op(p, OP_LBRACE)) return NULL;
    while (!tpl_is_op(tpl_cur(p), OP_RBRACE)) {
        if (d->n_items && tpl_expect_op(p, OP_COMMA)) return NULL;
        if (tpl_is_op(tpl_cur(p), OP_RBRACE)) break;
        struct tpl_node *k = tpl_parse_expression(p, 1);
        if (!k || tpl_expect_op(p, OP_COLON)) return NULL;
        struct tpl_node *v = tpl_parse_expression(p, 1);
        if (!v || push(p, &d->items, &d->n_items, &cap, k) || push(p, &d->items2, &n2, &cap2, v))
            return NULL;
    }
    return tpl_expect_op(p, OP_RBRACE) ? NULL : d;
}

struct tpl_node *tpl_parse_primary(struct tpl_parser *p) {
    const struct tpl_token *t = tpl_cur(p);
    struct tpl_node *n;
    switch (t->type) {
    case TK_NAME:
        p->i++;
        n = tpl_pnode(p, ND_CONST, t);
        if (!n) return NULL;
        if (tpl_is_name(t, "true") || tpl_is_name(t, "True"))
            n->value = tv_bool(1);
        else if (tpl_is_name(t, "false") || tpl_is_name(t, "False"))
            n->value = tv_bool(0);
        else if (tpl_is_name(t, "none") || tpl_is_name(t, "None"))
            n->value = tv_none();
        else {
            n->kind = ND_NAME;
            n->name = tpl_arena_strdup(p->a, t->s, t->len);
            n->name_len = t->len;
            if (!n->name) return tpl_pfail(p, t, "out of memory"), NULL;
            if (!strcmp(n->name, "caller")) p->uses |= TPL_USES_CALLER;
            if (!strcmp(n->name, "varargs")) p->uses |= TPL_USES_VARARGS;
            if (!strcmp(n->name, "kwargs")) p->uses |= TPL_USES_KWARGS;
        }
        return n;
    case TK_STRING: {
        size_t total = 0, j = p->i;
        for (; j < p->n && p->t[j].type == TK_STRING; j++) total += p->t[j].len;
        char *s = tpl_arena_alloc(p->a, total + 1);
        if (!s) return tpl_pfail(p, t, "out of memory"), NULL;
        size_t off = 0;
        for (; p->i < j; p->i++) {
            memcpy(s + off, p->t[p->i].s, p->t[p->i].len);
            off += p->t[p->i].len;
        }
        n = tpl_pnode(p, ND_CONST, t);
        if (!n || tpl_arena_str(p->a, s, total, &n->value))
            return tpl_pfail(p, t, "out of memory"), NULL;
        return n;
    }
    case TK_INT:
    case TK_FLOAT:
        p->i++;
        n = tpl_pnode(p, ND_CONST, t);
        if (n) n->value = t->type == TK_INT ? tv_int(t->i) : tv_float(t->f);
        return n;
    case TK_OP:
        if (t->op == OP_LPAREN) {
            p->i++;
            if (enter(p)) return NULL;
            n = tpl_parse_tuple(p, 0, 1, NULL, 1);
            p->depth--;
            return !n || tpl_expect_op(p, OP_RPAREN) ? NULL : n;
        }
        if (t->op == OP_LBRACKET || t->op == OP_LBRACE) {
            if (enter(p)) return NULL;
            n = t->op == OP_LBRACKET ? parse_list(p) : parse_dict(p);
            p->depth--;
            return n;
        }
        break;
    default:
        break;
    }
    return tpl_pfail(p, t, "unexpected %s",
                     t->type == TK_VAR_END     ? "end of print statement"
                     : t->type == TK_BLOCK_END ? "end of statement block"
                     : t->type == TK_EOF       ? "end of template"
                                               : "token"),
           NULL;
}

int tpl_parse_call_args(struct tpl_parser *p, struct tpl_node *call) {
    const struct tpl_token *open = tpl_cur(p);
    size_t cap = 0, kcap = 0, n_kv = 0;
    if (tpl_expect_op(p, OP_LPAREN)) return -1;
    int need_comma = 0;
    while (!tpl_is_op(tpl_cur(p), OP_RPAREN)) {
        if (need_comma) {
            if (tpl_expect_op(p, OP_COMMA)) return -1;
            if (tpl_is_op(tpl_cur(p), OP_RPAREN)) break;
        }
        const struct tpl_token *t = tpl_cur(p);
        if (tpl_is_op(t, OP_MUL)) {
            if (call->dyn_args || call->dyn_kwargs)
                return tpl_pfail(p, open, "invalid syntax for function call expression");
            p->i++;
            if (!(call->dyn_args = tpl_parse_expression(p, 1))) return -1;
        } else if (tpl_is_op(t, OP_POW)) {
            if (call->dyn_kwargs)
                return tpl_pfail(p, open, "invalid syntax for function call expression");
            p->i++;
            if (!(call->dyn_kwargs = tpl_parse_expression(p, 1))) return -1;
        } else if (t->type == TK_NAME && tpl_is_op(tpl_look(p), OP_ASSIGN)) {
            if (call->dyn_kwargs)
                return tpl_pfail(p, open, "invalid syntax for function call expression");
            p->i += 2;
            struct tpl_node *v = tpl_parse_expression(p, 1);
            if (!v) return -1;
            if (call->n_kw == kcap) {
                size_t nc = kcap ? kcap * 2 : 4;
                const char **nk = tpl_arena_alloc(p->a, nc * sizeof *nk);
                struct tpl_node **nv = tpl_arena_alloc(p->a, nc * sizeof *nv);
                if (!nk || !nv) return tpl_pfail(p, t, "out of memory");
                if (call->n_kw) {
                    memcpy(nk, call->kw_names, call->n_kw * sizeof *nk);
                    memcpy(nv, call->kw_vals, call->n_kw * sizeof *nv);
                }
                call->kw_names = nk;
                call->kw_vals = nv;
                kcap = nc;
            }
            call->kw_names[call->n_kw] = tpl_arena_strdup(p->a, t->s, t->len);
            call->kw_vals[call->n_kw++] = v;
            n_kv++;
        } else {
            if (call->dyn_args || call->dyn_kwargs || call->n_kw)
                return tpl_pfail(p, open, "invalid syntax for function call expression");
            struct tpl_node *e = tpl_parse_expression(p, 1);
            if (!e || push(p, &call->items, &call->n_items, &cap, e)) return -1;
        }
        need_comma = 1;
    }
    (void)n_kv;
    return tpl_expect_op(p, OP_RPAREN);
}

/* Every filter jinja2 3.1 knows: an unknown name is a syntax error there as here; names we
 * do not implement fail when they run (tpl_filter_exists tells them apart). */
static const char *const JINJA_FILTERS[] = {
    "abs",    "attr",       "batch",       "capitalize", "center",   "count",
    "d",      "default",    "dictsort",    "e",          "escape",   "filesizeformat",
    "first",  "float",      "forceescape", "format",     "groupby",  "indent",
    "int",    "items",      "join",        "last",       "length",   "list",
    "lower",  "map",        "max",         "min",        "pprint",   "random",
    "reject", "rejectattr", "replace",     "reverse",    "round",    "safe",
    "select", "selectattr", "slice",       "sort",       "string",   "striptags",
    "sum",    "title",      "tojson",      "trim",       "truncate", "unique",
    "upper",  "urlencode",  "urlize",      "wordcount",  "wordwrap", "xmlattr",
};

static int known_filter(const char *name) {
    for (size_t i = 0; i < sizeof JINJA_FILTERS / sizeof *JINJA_FILTERS; i++)
        if (!strcmp(JINJA_FILTERS[i], name)) return 1;
    return 0;
}

static char *dotted_name(struct tpl_parser *p) {
    const struct tpl_token *t = tpl_cur(p);
    if (t->type != TK_NAME) return tpl_pfail(p, t, "expected a name"), NULL;
    char buf[256];
    size_t n = 0;
    while (1) {
        t = tpl_cur(p);
        if (t->type != TK_NAME || n + t->len + 2 > sizeof buf)
            return tpl_pfail(p, t, "expected a name"), NULL;
        memcpy(buf + n, t->s, t->len);
        n += t->len;
        p->i++;
        if (!tpl_is_op(tpl_cur(p), OP_DOT)) break;
        p->i++;
        buf[n++] = '.';
    }
    return tpl_arena_strdup(p->a, buf, n);
}

struct tpl_node *tpl_parse_filter(struct tpl_parser *p, struct tpl_node *node, int start_inline) {
    while (tpl_is_op(tpl_cur(p), OP_PIPE) || start_inline) {
        if (!start_inline) p->i++;
        start_inline = 0;
        const struct tpl_token *at = tpl_cur(p);
        char *name = dotted_name(p);
        if (!name) return NULL;
        if (!known_filter(name)) return tpl_pfail(p, at, "no filter named '%s'", name), NULL;
        struct tpl_node *f = tpl_pnode(p, ND_FILTER, at);
        if (!f) return NULL;
        f->name = name;
        f->name_len = strlen(name);
        if (!node && !(node = tpl_pnode(p, ND_INPUT, at))) return NULL;
        f->a = node;
        if (tpl_is_op(tpl_cur(p), OP_LPAREN) && tpl_parse_call_args(p, f)) return NULL;
        node = f;
    }
    return node;
}

static struct tpl_node *parse_test(struct tpl_parser *p, struct tpl_node *node) {
    const struct tpl_token *at = tpl_cur(p);
    p->i++; /* is */
    int negated = 0;
    if (tpl_is_name(tpl_cur(p), "not")) {
        p->i++;
        negated = 1;
    }
    char *name = dotted_name(p);
    if (!name) return NULL;
    struct tpl_node *t = tpl_pnode(p, ND_TEST, at);
    if (!t) return NULL;
    t->name = name;
    t->name_len = strlen(name);
    t->a = node;
    t->flags = (uint8_t)negated;
    const struct tpl_token *c = tpl_cur(p);
    if (tpl_is_op(c, OP_LPAREN)) {
        if (tpl_parse_call_args(p, t)) return NULL;
    } else if ((c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT ||
                c->type == TK_FLOAT || tpl_is_op(c, OP_LPAREN) || tpl_is_op(c, OP_LBRACKET) ||
                tpl_is_op(c, OP_LBRACE)) &&
               !tpl_is_name(c, "else") && !tpl_is_name(c, "or") && !tpl_is_name(c, "and")) {
        if (tpl_is_name(c, "is"))
            return tpl_pfail(p, c, "you cannot chain multiple tests with is"), NULL;
        struct tpl_node *arg = tpl_parse_primary(p);
        while (arg && (tpl_is_op(tpl_cur(p), OP_DOT) || tpl_is_op(tpl_cur(p), OP_LBRACKET) ||
                       tpl_is_op(tpl_cur(p), OP_LPAREN))) {
            arg = parse_postfix_one(p, arg);
        }
        if (!arg) return NULL;
        t->items = tpl_arena_alloc(p->a, sizeof *t->items);
        if (!t->items) return tpl_pfail(p, c, "out of memory"), NULL;
        t->items[0] = arg;
        t->n_items = 1;
    }
    return t;
}

static struct tpl_node *parse_subscribed(struct tpl_parser *p) {
    const struct tpl_token *at = tpl_cur(p);
    struct tpl_node *args[3] = {0};
    if (tpl_is_op(at, OP_COLON)) {
        p->i++;
    } else {
        struct tpl_node *e = tpl_parse_expression(p, 1);
        if (!e || !tpl_is_op(tpl_cur(p), OP_COLON)) return e;
        p->i++;
        args[0] = e;
    }
    const struct tpl_token *t = tpl_cur(p);
    if (!tpl_is_op(t, OP_COLON) && !tpl_is_op(t, OP_RBRACKET) && !tpl_is_op(t, OP_COMMA) &&
        !(args[1] = tpl_parse_expression(p, 1)))
        return NULL;
    if (tpl_is_op(tpl_cur(p), OP_COLON)) {
        p->i++;
        t = tpl_cur(p);
        if (!tpl_is_op(t, OP_RBRACKET) && !tpl_is_op(t, OP_COMMA) &&
            !(args[2] = tpl_parse_expression(p, 1)))
            return NULL;
    }
    struct tpl_node *s = tpl_pnode(p, ND_SLICE, at);
    if (!s) return NULL;
    s->b = args[0];
    s->c = args[1];
    s->d = args[2];
    return s;
}

/* One `.name`, `.0`, `[...]` or `(...)` after node. */
static struct tpl_node *parse_postfix_one(struct tpl_parser *p, struct tpl_node *node) {
    const struct tpl_token *t = tpl_cur(p);
    if (tpl_is_op(t, OP_DOT)) {
        p->i++;
        const struct tpl_token *a = tpl_cur(p);
        p->i++;
        if (a->type == TK_NAME) {
            struct tpl_node *g = tpl_pnode(p, ND_GETATTR, t);
            if (!g) return NULL;
            g->a = node;
            g->name = tpl_arena_strdup(p->a, a->s, a->len);
            g->name_len = a->len;
            return g->name ? g : NULL;
        }
        if (a->type != TK_INT) return tpl_pfail(p, a, "expected name or number"), NULL;
        struct tpl_node *g = tpl_pnode(p, ND_GETITEM, t), *k = tpl_pnode(p, ND_CONST, a);
        if (!g || !k) return NULL;
        k->value = tv_int(a->i);
        g->a = node;
        g->b = k;
        return g;
    }
    if (tpl_is_op(t, OP_LBRACKET)) {
        p->i++;
        struct tpl_node *args[64];
        size_t n = 0;
        while (!tpl_is_op(tpl_cur(p), OP_RBRACKET)) {
            if (n && tpl_expect_op(p, OP_COMMA)) return NULL;
            if (n == 64) return tpl_pfail(p, t, "too many subscripts"), NULL;
            if (!(args[n++] = parse_subscribed(p))) return NULL;
        }
        if (tpl_expect_op(p, OP_RBRACKET)) return NULL;
        if (!n) return tpl_pfail(p, t, "expected a subscript"), NULL;
        struct tpl_node *g = tpl_pnode(p, ND_GETITEM, t);
        if (!g) return NULL;
        g->a = node;
        if (n == 1) {
            g->b = args[0];
        } else {
            struct tpl_node *tu = tpl_pnode(p, ND_TUPLE, t);
            if (!tu || !(tu->items = tpl_arena_alloc(p->a, n * sizeof *args))) return NULL;
            memcpy(tu->items, args, n * sizeof *args);
            tu->n_items = n;
            g->b = tu;
        }
        return g;
    }
    struct tpl_node *c = tpl_pnode(p, ND_CALL, t);
    if (!c) return NULL;
    c->a = node;
    return tpl_parse_call_args(p, c) ? NULL : c;
}

static struct tpl_node *parse_unary(struct tpl_parser *p, int with_filter) {
    const struct tpl_token *t = tpl_cur(p);
    struct tpl_node *node;
    if (enter(p)) return NULL;
    if (tpl_is_op(t, OP_SUB) || tpl_is_op(t, OP_ADD)) {
        p->i++;
        struct tpl_node *a = parse_unary(p, 0);
        node = a ? tpl_pnode(p, t->op == OP_SUB ? ND_NEG : ND_POS, t) : NULL;
        if (node) node->a = a;
    } else {
        node = tpl_parse_primary(p);
    }
    while (node && (tpl_is_op(tpl_cur(p), OP_DOT) || tpl_is_op(tpl_cur(p), OP_LBRACKET) ||
                    tpl_is_op(tpl_cur(p), OP_LPAREN)))
        node = parse_postfix_one(p, node);
    while (node && with_filter) {
        const struct tpl_token *c = tpl_cur(p);
        if (tpl_is_op(c, OP_PIPE))
            node = tpl_parse_filter(p, node, 0);
        else if (tpl_is_name(c, "is"))
            node = parse_test(p, node);
        else if (tpl_is_op(c, OP_LPAREN))
            node = parse_postfix_one(p, node);
        else
            break;
    }
    p->depth--;
    return node;
}
