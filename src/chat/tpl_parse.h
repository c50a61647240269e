/* chat/tpl_parse.h: parser state shared by tpl_parse.c (statements) and tpl_parse_expr.c
 * (expressions). The grammar and its precedence follow jinja2's parser, so that templates
 * mean here what they mean there (`is` binds tighter than `+`, `~` tighter than `+`, `**` is
 * left-associative, a filter applies to the unary expression before it). */
#ifndef DSPARK_CHAT_TPL_PARSE_H
#define DSPARK_CHAT_TPL_PARSE_H

#include "chat/tpl_impl.h"

#define TPL_MAX_NESTING 200

struct tpl_parser {
    const struct tpl_token *t;
    size_t i, n;
    struct tpl_arena *a;
    char *err;
    size_t err_cap;
    int depth;   /* expression/statement recursion */
    int in_loop; /* for break/continue */
    int uses;    /* TPL_USES_* names seen since the innermost macro began */
};

int tpl_pfail(struct tpl_parser *p, const struct tpl_token *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
struct tpl_node *tpl_pnode(struct tpl_parser *p, int kind, const struct tpl_token *at);

static inline const struct tpl_token *tpl_cur(const struct tpl_parser *p) {
    return &p->t[p->i];
}
static inline const struct tpl_token *tpl_look(const struct tpl_parser *p) {
    return &p->t[p->i + 1 < p->n ? p->i + 1 : p->i];
}
int tpl_is_name(const struct tpl_token *t, const char *name);
int tpl_is_op(const struct tpl_token *t, int op);
int tpl_expect_op(struct tpl_parser *p, int op);
int tpl_expect_name(struct tpl_parser *p, const char *name);

/* Expressions (tpl_parse_expr.c). NULL on error (message in p->err). */
struct tpl_node *tpl_parse_expression(struct tpl_parser *p, int with_condexpr);
/* A comma-separated list that becomes a tuple when it has a comma. extra_end is a name that
 * also ends it ("in", "recursive") or NULL. */
struct tpl_node *tpl_parse_tuple(struct tpl_parser *p, int simplified, int with_condexpr,
                                 const char *extra_end, int explicit_parens);
struct tpl_node *tpl_parse_primary(struct tpl_parser *p);
/* `| name(args) | ...` applied to node (node NULL: a filter block's input). With start_inline
 * the first filter has no leading pipe. */
struct tpl_node *tpl_parse_filter(struct tpl_parser *p, struct tpl_node *node, int start_inline);
int tpl_parse_call_args(struct tpl_parser *p, struct tpl_node *call);

#endif
