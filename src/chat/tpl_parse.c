/* chat/tpl_parse.c: statements. Node roles:
 *   BODY items[]            IF a=test b=body c=else (BODY or the elif's IF)
 *   FOR a=target b=iter c=body d=else e=filter      SET a=target b=value
 *   SET_BLOCK a=target b=body c=filter chain (its input is an INPUT node)
 *   MACRO name items=params items2=defaults b=body  CALL_BLOCK a=call items/items2 b=body
 *   FILTER_BLOCK a=filter chain b=body              WITH items=targets items2=values b=body
 *   PRINT a=expr            DATA value
 * Tags outside the chat-template subset of jinja2 (extends, block, include, import, ...) are
 * reported as unsupported; unknown tags are syntax errors as in jinja2. */
#include "chat/tpl_parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int tpl_pfail(struct tpl_parser *p, const struct tpl_token *at, const char *fmt, ...) {
    if (p->err[0]) return -1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->err_cap, "template syntax error at line %d, column %d: %s", at->line,
             at->col, msg);
    return -1;
}

struct tpl_node *tpl_pnode(struct tpl_parser *p, int kind, const struct tpl_token *at) {
    struct tpl_node *n = tpl_arena_alloc(p->a, sizeof *n);
    if (!n) {
        tpl_pfail(p, at, "out of memory");
        return NULL;
    }
    n->kind = (uint8_t)kind;
    n->line = at->line;
    return n;
}

int tpl_is_name(const struct tpl_token *t, const char *name) {
    size_t n = strlen(name);
    return t->type == TK_NAME && t->len == n && !memcmp(t->s, name, n);
}

int tpl_is_op(const struct tpl_token *t, int op) {
    return t->type == TK_OP && t->op == op;
}

static const char *describe(const struct tpl_token *t) {
    switch (t->type) {
    case TK_EOF:
        return "end of template";
    case TK_DATA:
        return "template data";
    case TK_VAR_BEGIN:
        return "'{{'";
    case TK_VAR_END:
        return "end of print statement";
    case TK_BLOCK_BEGIN:
        return "'{%'";
    case TK_BLOCK_END:
        return "end of statement block";
    case TK_NAME:
        return "a name";
    case TK_STRING:
        return "a string";
    case TK_INT:
        return "an integer";
    case TK_FLOAT:
        return "a float";
    default:
        return "an operator";
    }
}

int tpl_expect_op(struct tpl_parser *p, int op) {
    static const char *const names[] = {
        [OP_COMMA] = "','",    [OP_RPAREN] = "')'", [OP_RBRACKET] = "']'",
        [OP_RBRACE] = "'}'",   [OP_COLON] = "':'",  [OP_LPAREN] = "'('",
        [OP_LBRACKET] = "'['", [OP_LBRACE] = "'{'", [OP_ASSIGN] = "'='",
    };
    const struct tpl_token *t = tpl_cur(p);
    if (tpl_is_op(t, op)) {
        p->i++;
        return 0;
    }
    const char *want =
        (size_t)op < sizeof names / sizeof *names && names[op] ? names[op] : "operator";
    return tpl_pfail(p, t, "expected %s, got %s", want, describe(t));
}

int tpl_expect_name(struct tpl_parser *p, const char *name) {
    if (tpl_is_name(tpl_cur(p), name)) {
        p->i++;
        return 0;
    }
    return tpl_pfail(p, tpl_cur(p), "expected '%s', got %s", name, describe(tpl_cur(p)));
}

static int expect_type(struct tpl_parser *p, int type, const char *what) {
    if (tpl_cur(p)->type == type) {
        p->i++;
        return 0;
    }
    return tpl_pfail(p, tpl_cur(p), "expected %s, got %s", what, describe(tpl_cur(p)));
}

static int push(struct tpl_parser *p, struct tpl_node *body, size_t *cap, struct tpl_node *x) {
    if (body->n_items == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        struct tpl_node **nv = tpl_arena_alloc(p->a, nc * sizeof *nv);
        if (!nv) return tpl_pfail(p, tpl_cur(p), "out of memory");
        if (body->n_items) memcpy(nv, body->items, body->n_items * sizeof *nv);
        body->items = nv;
        *cap = nc;
    }
    body->items[body->n_items++] = x;
    return 0;
}

static struct tpl_node *parse_body(struct tpl_parser *p, const char *const *end, size_t n_end);
static struct tpl_node *parse_statement(struct tpl_parser *p);

/* After a tag's arguments: `%}`, the body up to one of end (current token left at that name). */
static struct tpl_node *parse_statements(struct tpl_parser *p, const char *const *end, size_t n_end,
                                         int drop_needle) {
    if (tpl_is_op(tpl_cur(p), OP_COLON)) p->i++;
    if (expect_type(p, TK_BLOCK_END, "end of statement block")) return NULL;
    struct tpl_node *b = parse_body(p, end, n_end);
    if (!b) return NULL;
    if (tpl_cur(p)->type == TK_EOF) {
        tpl_pfail(p, tpl_cur(p), "unexpected end of template, expected '%s'", end[n_end - 1]);
        return NULL;
    }
    if (drop_needle) p->i++;
    return b;
}

static struct tpl_node *parse_body(struct tpl_parser *p, const char *const *end, size_t n_end) {
    struct tpl_node *body = tpl_pnode(p, ND_BODY, tpl_cur(p));
    size_t cap = 0;
    if (!body) return NULL;
    if (++p->depth > TPL_MAX_NESTING)
        return tpl_pfail(p, tpl_cur(p), "blocks nested too deeply"), NULL;
    while (1) {
        const struct tpl_token *t = tpl_cur(p);
        if (t->type == TK_EOF) break;
        if (t->type == TK_DATA) {
            struct tpl_node *d = tpl_pnode(p, ND_DATA, t);
            if (!d || tpl_arena_str(p->a, t->s, t->len, &d->value))
                return tpl_pfail(p, t, "out of memory"), NULL;
            p->i++;
            if (push(p, body, &cap, d)) return NULL;
        } else if (t->type == TK_VAR_BEGIN) {
            p->i++;
            struct tpl_node *pr = tpl_pnode(p, ND_PRINT, t);
            if (!pr || !(pr->a = tpl_parse_tuple(p, 0, 1, NULL, 0))) return NULL;
            if (expect_type(p, TK_VAR_END, "end of print statement")) return NULL;
            if (push(p, body, &cap, pr)) return NULL;
        } else if (t->type == TK_BLOCK_BEGIN) {
            const struct tpl_token *name = &p->t[p->i + 1];
            for (size_t k = 0; k < n_end; k++)
                if (tpl_is_name(name, end[k])) {
                    p->i++;
                    p->depth--;
                    return body;
                }
            p->i++;
            struct tpl_node *s = parse_statement(p);
            if (!s) return NULL;
            if (expect_type(p, TK_BLOCK_END, "end of statement block")) return NULL;
            if (s->kind == ND_BODY) {
                for (size_t k = 0; k < s->n_items; k++)
                    if (push(p, body, &cap, s->items[k])) return NULL;
            } else if (push(p, body, &cap, s)) {
                return NULL;
            }
        } else {
            tpl_pfail(p, t, "unexpected %s", describe(t));
            return NULL;
        }
    }
    p->depth--;
    return body;
}

/* ---- assignment targets ---- */

static int assignable_name(const struct tpl_token *t) {
    static const char *const consts[] = {"true", "false", "none", "True", "False", "None"};
    if (t->type != TK_NAME) return 0;
    for (size_t i = 0; i < 6; i++)
        if (tpl_is_name(t, consts[i])) return 0;
    return 1;
}

static struct tpl_node *name_node(struct tpl_parser *p) {
    const struct tpl_token *t = tpl_cur(p);
    if (!assignable_name(t)) return tpl_pfail(p, t, "can't assign to %s", describe(t)), NULL;
    struct tpl_node *n = tpl_pnode(p, ND_NAME, t);
    if (!n || !(n->name = tpl_arena_strdup(p->a, t->s, t->len))) return NULL;
    n->name_len = t->len;
    p->i++;
    return n;
}

static int check_target(struct tpl_parser *p, const struct tpl_node *t,
                        const struct tpl_token *at) {
    if (t->kind == ND_NAME) return 0;
    if (t->kind == ND_TUPLE) {
        for (size_t i = 0; i < t->n_items; i++)
            if (t->items[i]->kind != ND_NAME)
                return tpl_pfail(p, at, "can't assign to this target");
        return 0;
    }
    return tpl_pfail(p, at, "can't assign to this target");
}

static struct tpl_node *parse_target(struct tpl_parser *p, const char *extra_end, int with_ns) {
    const struct tpl_token *at = tpl_cur(p);
    if (with_ns && tpl_is_op(tpl_look(p), OP_DOT)) {
        struct tpl_node *ns = name_node(p);
        if (!ns) return NULL;
        p->i++;
        const struct tpl_token *attr = tpl_cur(p);
        if (attr->type != TK_NAME) return tpl_pfail(p, attr, "expected a name"), NULL;
        struct tpl_node *g = tpl_pnode(p, ND_GETATTR, at);
        if (!g || !(g->name = tpl_arena_strdup(p->a, attr->s, attr->len))) return NULL;
        g->name_len = attr->len;
        g->a = ns;
        p->i++;
        return g;
    }
    struct tpl_node *t = tpl_parse_tuple(p, 1, 0, extra_end, 0);
    if (!t || check_target(p, t, at)) return NULL;
    return t;
}

static int parse_signature(struct tpl_parser *p, struct tpl_node *n) {
    struct tpl_node *params[256], *defaults[256];
    size_t k = 0;
    int any_default = 0;
    if (tpl_expect_op(p, OP_LPAREN)) return -1;
    while (!tpl_is_op(tpl_cur(p), OP_RPAREN)) {
        if (k && tpl_expect_op(p, OP_COMMA)) return -1;
        if (k == 256) return tpl_pfail(p, tpl_cur(p), "too many parameters");
        const struct tpl_token *at = tpl_cur(p);
        if (!(params[k] = name_node(p))) return -1;
        defaults[k] = NULL;
        if (tpl_is_op(tpl_cur(p), OP_ASSIGN)) {
            p->i++;
            if (!(defaults[k] = tpl_parse_expression(p, 1))) return -1;
            any_default = 1;
        } else if (any_default) {
            return tpl_pfail(p, at, "non-default argument follows default argument");
        }
        k++;
    }
    p->i++;
    n->items = tpl_arena_alloc(p->a, (k + 1) * sizeof *n->items);
    n->items2 = tpl_arena_alloc(p->a, (k + 1) * sizeof *n->items2);
    if (!n->items || !n->items2) return tpl_pfail(p, tpl_cur(p), "out of memory");
    memcpy(n->items, params, k * sizeof *params);
    memcpy(n->items2, defaults, k * sizeof *defaults);
    n->n_items = k;
    return 0;
}

/* ---- statements ---- */

static struct tpl_node *parse_for(struct tpl_parser *p, const struct tpl_token *at) {
    static const char *const end1[] = {"else", "endfor"}, *const end2[] = {"endfor"};
    struct tpl_node *f = tpl_pnode(p, ND_FOR, at);
    if (!f || !(f->a = parse_target(p, "in", 0)) || tpl_expect_name(p, "in")) return NULL;
    if (!(f->b = tpl_parse_tuple(p, 0, 0, "recursive", 0))) return NULL;
    if (tpl_is_name(tpl_cur(p), "if")) {
        p->i++;
        if (!(f->e = tpl_parse_expression(p, 1))) return NULL;
    }
    if (tpl_is_name(tpl_cur(p), "recursive"))
        return tpl_pfail(p, tpl_cur(p), "recursive loops are not supported"), NULL;
    int was = p->in_loop;
    p->in_loop = 1;
    f->c = parse_statements(p, end1, 2, 0);
    p->in_loop = was;
    if (!f->c) return NULL;
    if (tpl_is_name(tpl_cur(p), "else")) {
        p->i++;
        if (!(f->d = parse_statements(p, end2, 1, 1))) return NULL;
    } else {
        p->i++;
    }
    return f;
}

static struct tpl_node *parse_if(struct tpl_parser *p, const struct tpl_token *at) {
    static const char *const end1[] = {"elif", "else", "endif"}, *const end2[] = {"endif"};
    struct tpl_node *n = tpl_pnode(p, ND_IF, at);
    if (!n || !(n->a = tpl_parse_tuple(p, 0, 0, NULL, 0))) return NULL;
    if (!(n->b = parse_statements(p, end1, 3, 0))) return NULL;
    const struct tpl_token *t = tpl_cur(p);
    p->i++;
    if (tpl_is_name(t, "elif")) {
        if (++p->depth > TPL_MAX_NESTING) return tpl_pfail(p, t, "too many elif branches"), NULL;
        n->c = parse_if(p, t);
        p->depth--;
        return n->c ? n : NULL;
    }
    if (tpl_is_name(t, "else") && !(n->c = parse_statements(p, end2, 1, 1))) return NULL;
    return n;
}

static struct tpl_node *parse_set(struct tpl_parser *p, const struct tpl_token *at) {
    static const char *const end[] = {"endset"};
    struct tpl_node *target = parse_target(p, NULL, 1);
    if (!target) return NULL;
    if (tpl_is_op(tpl_cur(p), OP_ASSIGN)) {
        p->i++;
        struct tpl_node *n = tpl_pnode(p, ND_SET, at);
        if (!n || !(n->b = tpl_parse_tuple(p, 0, 1, NULL, 0))) return NULL;
        n->a = target;
        return n;
    }
    struct tpl_node *n = tpl_pnode(p, ND_SET_BLOCK, at);
    if (!n) return NULL;
    n->a = target;
    if (tpl_is_op(tpl_cur(p), OP_PIPE) && !(n->c = tpl_parse_filter(p, NULL, 0))) return NULL;
    return (n->b = parse_statements(p, end, 1, 1)) ? n : NULL;
}

static struct tpl_node *parse_macro_like(struct tpl_parser *p, const struct tpl_token *at,
                                         int call) {
    static const char *const endm[] = {"endmacro"}, *const endc[] = {"endcall"};
    struct tpl_node *n = tpl_pnode(p, call ? ND_CALL_BLOCK : ND_MACRO, at);
    if (!n) return NULL;
    if (call) {
        if (tpl_is_op(tpl_cur(p), OP_LPAREN) && parse_signature(p, n)) return NULL;
        const struct tpl_token *ct = tpl_cur(p);
        if (!(n->a = tpl_parse_expression(p, 1))) return NULL;
        if (n->a->kind != ND_CALL) return tpl_pfail(p, ct, "expected call"), NULL;
    } else {
        struct tpl_node *name = name_node(p);
        if (!name || parse_signature(p, n)) return NULL;
        n->name = name->name;
        n->name_len = name->name_len;
    }
    int was = p->in_loop, uses = p->uses;
    p->in_loop = 0;
    p->uses = 0;
    n->b = parse_statements(p, call ? endc : endm, 1, 1);
    p->in_loop = was;
    if (!n->b) return NULL;
    n->flags = (uint8_t)p->uses; /* which of caller/varargs/kwargs the body mentions */
    p->uses |= uses;
    return n;
}

static struct tpl_node *parse_with(struct tpl_parser *p, const struct tpl_token *at) {
    static const char *const end[] = {"endwith"};
    struct tpl_node *n = tpl_pnode(p, ND_WITH, at);
    struct tpl_node *targets[64], *values[64];
    size_t k = 0;
    if (!n) return NULL;
    while (tpl_cur(p)->type != TK_BLOCK_END) {
        if (k && tpl_expect_op(p, OP_COMMA)) return NULL;
        if (k == 64) return tpl_pfail(p, tpl_cur(p), "too many targets"), NULL;
        if (!(targets[k] = parse_target(p, NULL, 0)) || tpl_expect_op(p, OP_ASSIGN)) return NULL;
        if (!(values[k++] = tpl_parse_expression(p, 1))) return NULL;
    }
    n->items = tpl_arena_alloc(p->a, (k + 1) * sizeof *targets);
    n->items2 = tpl_arena_alloc(p->a, (k + 1) * sizeof *values);
    if (!n->items || !n->items2) return NULL;
    memcpy(n->items, targets, k * sizeof *targets);
    memcpy(n->items2, values, k * sizeof *values);
    n->n_items = k;
    return (n->b = parse_statements(p, end, 1, 1)) ? n : NULL;
}

static struct tpl_node *parse_statement(struct tpl_parser *p) {
    const struct tpl_token *t = tpl_cur(p);
    if (t->type != TK_NAME) return tpl_pfail(p, t, "tag name expected"), NULL;
    p->i++;
    if (tpl_is_name(t, "for")) return parse_for(p, t);
    if (tpl_is_name(t, "if")) return parse_if(p, t);
    if (tpl_is_name(t, "set")) return parse_set(p, t);
    if (tpl_is_name(t, "macro")) return parse_macro_like(p, t, 0);
    if (tpl_is_name(t, "call")) return parse_macro_like(p, t, 1);
    if (tpl_is_name(t, "with")) return parse_with(p, t);
    if (tpl_is_name(t, "filter")) {
        static const char *const end[] = {"endfilter"};
        struct tpl_node *n = tpl_pnode(p, ND_FILTER_BLOCK, t);
        if (!n || !(n->a = tpl_parse_filter(p, NULL, 1))) return NULL;
        return (n->b = parse_statements(p, end, 1, 1)) ? n : NULL;
    }
    if (tpl_is_name(t, "generation")) { /* transformers' assistant-mask tag: renders its body */
        static const char *const end[] = {"endgeneration"};
        return parse_statements(p, end, 1, 1);
    }
    if (tpl_is_name(t, "break") || tpl_is_name(t, "continue")) {
        if (!p->in_loop) return tpl_pfail(p, t, "'%.*s' outside loop", (int)t->len, t->s), NULL;
        return tpl_pnode(p, tpl_is_name(t, "break") ? ND_BREAK : ND_CONTINUE, t);
    }
    if (tpl_is_name(t, "print")) { /* {% print a, b %} prints each expression */
        struct tpl_node *body = tpl_pnode(p, ND_BODY, t);
        size_t cap = 0;
        if (!body) return NULL;
        do {
            if (body->n_items) p->i++;
            struct tpl_node *n = tpl_pnode(p, ND_PRINT, t);
            if (!n || !(n->a = tpl_parse_expression(p, 1)) || push(p, body, &cap, n)) return NULL;
        } while (tpl_is_op(tpl_cur(p), OP_COMMA));
        return body;
    }
    static const char *const unsupported[] = {"extends", "block", "include",
                                              "import",  "from",  "autoescape"};
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
        if (tpl_is_name(t, unsupported[i]))
            return tpl_pfail(p, t, "the '%s' tag is not supported in chat templates",
                             unsupported[i]),
                   NULL;
    return tpl_pfail(p, t, "encountered unknown tag '%.*s'", (int)(t->len > 64 ? 64 : t->len),
                     t->s),
           NULL;
}

int tpl_parse(const struct tpl_tokens *toks, struct tpl_arena *a, struct tpl_node **out, char *err,
              size_t err_cap) {
    struct tpl_parser p = {.t = toks->v, .n = toks->n, .a = a, .err = err, .err_cap = err_cap};
    err[0] = 0;
    struct tpl_node *body = parse_body(&p, NULL, 0);
    if (!body) return -1;
    if (tpl_cur(&p)->type != TK_EOF) {
        tpl_pfail(&p, tpl_cur(&p), "encountered unknown tag");
        return -1;
    }
    *out = body;
    return 0;
}
