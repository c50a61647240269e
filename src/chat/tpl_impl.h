/* chat/tpl_impl.h: internals of the Jinja2-compatible template engine, shared by the files of
 * src/chat and nothing else. Pipeline: tpl_lex() turns the source into tokens (whitespace
 * control applied), tpl_parse() builds an immutable AST in the template's arena, and the
 * evaluator (tpl_eval.c, tpl_expr.c, tpl_call.c) walks it over struct tv values with a step,
 * depth, memory and output budget. Functions return 0 on success and -1 on an error whose
 * message is in the render state (or the parser's error buffer). */
#ifndef DSPARK_CHAT_TPL_IMPL_H
#define DSPARK_CHAT_TPL_IMPL_H

#include "chat/tpl_val.h"

#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct cJSON;

/* ---- arena: AST memory, freed at once with the template ---- */
struct tpl_arena {
    struct tpl_chunk *head;
};
void *tpl_arena_alloc(struct tpl_arena *a, size_t n); /* zeroed; NULL when out of memory */
char *tpl_arena_strdup(struct tpl_arena *a, const char *s, size_t n);
/* An immortal string value stored in the arena (template constants). */
int tpl_arena_str(struct tpl_arena *a, const char *s, size_t n, struct tv *out);
void tpl_arena_free(struct tpl_arena *a);

/* ---- tokens ---- */
enum tpl_tok {
    TK_EOF,
    TK_DATA,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING,
    TK_INT,
    TK_FLOAT,
    TK_OP,
};

enum tpl_op {
    OP_NONE,
    OP_ADD,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_TILDE,
    OP_LPAREN,
    OP_RPAREN,
    OP_LBRACKET,
    OP_RBRACKET,
    OP_LBRACE,
    OP_RBRACE,
    OP_COMMA,
    OP_DOT,
    OP_COLON,
    OP_PIPE,
    OP_ASSIGN,
    OP_EQ,
    OP_NE,
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_SEMI,
    OP_IN,    /* compare operators only */
    OP_NOTIN, /* compare operators only */
};

struct tpl_token {
    uint8_t type; /* enum tpl_tok */
    uint8_t op;   /* enum tpl_op for TK_OP */
    int line, col;
    const char *s; /* TK_DATA, TK_NAME, TK_STRING: text (arena or source), not NUL-terminated */
    size_t len;
    int64_t i;
    double f;
};

struct tpl_tokens {
    struct tpl_token *v;
    size_t n, cap;
};

/* Tokenizes src (already newline-normalized, see tpl_normalize). Tokens point into src and
 * into the arena. -1 with a message in err on a lexical error. */
int tpl_lex(const char *src, size_t len, struct tpl_arena *a, struct tpl_tokens *out, char *err,
            size_t err_cap);
/* Newlines \r\n and \r become \n and one trailing newline is dropped, as jinja2 does. The
 * result is an arena copy. */
char *tpl_normalize(struct tpl_arena *a, const char *src, size_t len, size_t *out_len);

/* ---- AST ---- */
enum tpl_node_kind {
    /* expressions */
    ND_CONST,
    ND_NAME,
    ND_LIST,
    ND_TUPLE,
    ND_DICT,
    ND_GETATTR,
    ND_GETITEM,
    ND_SLICE,
    ND_CALL,
    ND_FILTER,
    ND_TEST,
    ND_NOT,
    ND_NEG,
    ND_POS,
    ND_BINOP,
    ND_AND,
    ND_OR,
    ND_COMPARE,
    ND_COND,
    ND_INPUT, /* the value a filter block or set block filters */
    /* statements */
    ND_BODY,
    ND_DATA,
    ND_PRINT,
    ND_IF,
    ND_FOR,
    ND_SET,
    ND_SET_BLOCK,
    ND_MACRO,
    ND_CALL_BLOCK,
    ND_FILTER_BLOCK,
    ND_WITH,
    ND_BREAK,
    ND_CONTINUE,
};

struct tpl_node {
    uint8_t kind;  /* enum tpl_node_kind */
    uint8_t op;    /* ND_BINOP: enum tpl_op */
    uint8_t flags; /* ND_MACRO: TPL_USES_*; ND_TEST: negated */
    int line;
    struct tv value;  /* ND_CONST, ND_DATA (immortal) */
    const char *name; /* ND_NAME, ND_GETATTR, ND_FILTER, ND_TEST, ND_MACRO (NUL-terminated) */
    size_t name_len;
    struct tpl_node *a, *b, *c, *d, *e; /* children; see tpl_parse.c for each kind's roles */
    struct tpl_node **items;            /* list items, call args, statements, macro params */
    struct tpl_node **items2;           /* dict values, macro defaults */
    uint8_t *ops;                       /* ND_COMPARE: operator before each of items */
    size_t n_items;
    const char **kw_names; /* call keyword arguments */
    struct tpl_node **kw_vals;
    size_t n_kw;
    struct tpl_node *dyn_args, *dyn_kwargs; /* *args, **kwargs */
};

enum { TPL_USES_CALLER = 1, TPL_USES_VARARGS = 2, TPL_USES_KWARGS = 4 };

/* Most nested evaluation frames (statements, expressions, macro calls) of a render: bounds
 * the C stack a template can use. */
#define TPL_MAX_NEST 1000

/* Parses the tokens into a body node. -1 with "line L, column C: message" in err. */
int tpl_parse(const struct tpl_tokens *toks, struct tpl_arena *a, struct tpl_node **out, char *err,
              size_t err_cap);

/* ---- evaluation ---- */
struct tpl_scope {
    int32_t rc;
    struct tpl_scope *parent;
    size_t n, cap;
    const char **names; /* NUL-terminated, owned by the AST or the scope (see own_names) */
    struct tv *vals;
};

struct tpl_buf {
    char *p;
    size_t n, cap;
};

struct tpl_render {
    struct tv ctx;          /* dict of the caller's variables */
    struct tpl_scope *root; /* top-level `set`s */
    uint64_t steps, max_steps;
    int depth, max_depth;   /* macro call nesting */
    int nest;               /* tpl_exec/tpl_eval recursion (TPL_MAX_NEST) */
    size_t max_output;      /* bytes in any one output buffer */
    time_t now;             /* strftime_now() time */
    struct tv keep;         /* macros and namespaces, torn down at the end (cycles) */
    const struct tv *input; /* ND_INPUT's value while a filter block is applied */
    int failed;
    int raised; /* the error came from raise_exception() */
    int limit;  /* the error is a budget limit (steps, output, memory, depth) */
    int err_line;
    char err[512];
};

/* Sets the render error (first one wins) and returns -1. */
int tpl_fail(struct tpl_render *r, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int tpl_oom(struct tpl_render *r, int line);
/* tpl_fail for a budget limit (steps, output size, memory, recursion). */
int tpl_limit(struct tpl_render *r, int line, const char *what);
/* Counts n steps; -1 (with the error set) past the limit. */
int tpl_step(struct tpl_render *r, int line, uint64_t n);

int tpl_buf_put(struct tpl_render *r, struct tpl_buf *b, const char *s, size_t n);
void tpl_buf_free(struct tpl_buf *b);

struct tpl_scope *tpl_scope_new(struct tpl_scope *parent);
void tpl_scope_release(struct tpl_scope *s);
/* Binds name in s (v consumed). */
int tpl_scope_set(struct tpl_render *r, struct tpl_scope *s, const char *name, struct tv v);
/* Borrowed value of name from the scope chain, the context, then NULL. */
const struct tv *tpl_scope_find(struct tpl_render *r, struct tpl_scope *s, const char *name);

/* Keeps a reference to a macro or namespace until the render ends: they may form cycles,
 * which the end of the render breaks. */
int tpl_keep(struct tpl_render *r, const struct tv *v);
/* Evaluates n where ND_INPUT stands for *input (filter and set blocks). */
int tpl_eval_with_input(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
                        const struct tv *input, struct tv *out);

int tpl_exec(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n,
             struct tpl_buf *out);
int tpl_eval(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *n, struct tv *out);

/* ---- calls ---- */
struct tpl_args {
    size_t n;
    struct tv *pos;
    size_t n_kw;
    const char **kw; /* names borrowed from the AST (or a dict kept for the render) */
    struct tv *kwv;
    size_t cap_pos, cap_kw;
};
/* Argument i by position, else by keyword name; NULL when not given. */
const struct tv *tpl_arg(const struct tpl_args *a, size_t i, const char *name);
/* Fails unless every argument is one of the n_names parameters (by position or name). */
int tpl_args_check(struct tpl_render *r, int line, const struct tpl_args *a, const char *what,
                   const char *const *names, size_t n_names);
void tpl_args_free(struct tpl_args *a);
int tpl_eval_args(struct tpl_render *r, struct tpl_scope *s, const struct tpl_node *call,
                  struct tpl_args *out);
int tpl_call_value(struct tpl_render *r, int line, const struct tv *fn, struct tpl_args *a,
                   struct tv *out);
int tpl_call_macro(struct tpl_render *r, int line, struct tv_func *fn, struct tpl_args *a,
                   const struct tv *caller, struct tv *out);

enum tpl_fn_kind { FN_MACRO, FN_BUILTIN, FN_METHOD };
struct tv_func {
    int32_t rc;
    uint8_t kind;
    uint8_t flags;               /* TPL_USES_* of the macro */
    const struct tpl_node *node; /* FN_MACRO: ND_MACRO or ND_CALL_BLOCK */
    struct tpl_scope *closure;   /* FN_MACRO: the scope it was defined in */
    const char *name;            /* macro, builtin or method name */
    struct tv self;              /* FN_METHOD receiver */
};

struct tv_loop {
    int32_t rc;
    struct tv items; /* the (filtered) list being iterated */
    size_t i;
    int depth;
    struct tv changed; /* loop.changed() memory */
    int has_changed;
};

int32_t *tpl_func_rc(struct tv_func *f);
void tpl_func_release(struct tv_func *f);
int32_t *tpl_loop_rc(struct tv_loop *l);
void tpl_loop_release(struct tv_loop *l);
int64_t tpl_loop_length(const struct tv_loop *l);
unsigned tpl_loop_depth(const struct tv_loop *l);
unsigned tpl_func_depth(const struct tv_func *f);
void tpl_dict_clear(struct tv_dict *d);
int tpl_func_new(struct tpl_render *r, enum tpl_fn_kind kind, const char *name, struct tv *out);

/* Attribute and item access as jinja2's sandbox does them. */
int tpl_getattr(struct tpl_render *r, int line, const struct tv *obj, const char *name,
                struct tv *out);
int tpl_getitem(struct tpl_render *r, int line, const struct tv *obj, const struct tv *key,
                struct tv *out);
/* Iterates v as Python would into a list (strings by character, dicts by key, undefined as
 * empty). Fails for non-iterables. */
int tpl_iter_list(struct tpl_render *r, int line, const struct tv *v, struct tv *out);

int tpl_filter(struct tpl_render *r, int line, const char *name, const struct tv *v,
               struct tpl_args *a, struct tv *out);
int tpl_filter_exists(const char *name);
int tpl_test(struct tpl_render *r, int line, const char *name, const struct tv *v,
             struct tpl_args *a, int *out);
int tpl_test_exists(const char *name);
int tpl_method(struct tpl_render *r, int line, const struct tv *self, const char *name,
               struct tpl_args *a, struct tv *out);
int tpl_has_method(const struct tv *self, const char *name);
int tpl_builtin(struct tpl_render *r, int line, const char *name, struct tpl_args *a,
                struct tv *out);
int tpl_is_builtin(const char *name);

/* Python type name of v for messages ("int", "NoneType", ...). */
const char *tpl_type_name(const struct tv *v);
/* The error for using undefined u where a value is needed. */
int tpl_undefined_error(struct tpl_render *r, int line, const struct tv *u);
/* markupsafe.escape(v): a Markup string (Markup passes through). */
int tpl_escape_str(struct tpl_render *r, const struct tv *v, struct tv *out);
/* a op b for the arithmetic operators and ~. */
int tpl_binop(struct tpl_render *r, int line, int op, const struct tv *a, const struct tv *b,
              struct tv *out);
/* Python's `item in c`. */
int tpl_contains(struct tpl_render *r, int line, const struct tv *item, const struct tv *c,
                 int *out);
/* obj[b0:b1:b2] (each None or an int). */
int tpl_slice(struct tpl_render *r, int line, const struct tv *obj, const struct tv *bounds,
              struct tv *out);
/* A cJSON tree to a value (integral numbers become ints); -1 on bad UTF-8 or depth. */
int tpl_from_cjson(const struct cJSON *j, struct tv *out, int depth);
/* The canonical (static) name of a method of self, or NULL. */
const char *tpl_method_name(const struct tv *self, const char *name);

/* Renders t with a context that build() makes (under the render's memory budget); build
 * returns OK or an error code with a message in err. (template.c) */
struct chat_template;
struct chat_render_opts;
int tpl_render_built(const struct chat_template *t,
                     int (*build)(void *arg, struct tv *ctx, char *err, size_t err_cap), void *arg,
                     const struct chat_render_opts *opts, char **out, size_t *out_len, char *err,
                     size_t err_cap);

/* ---- text: Python str()/repr() of values, JSON, UTF-8 helpers (tpl_str.c, tpl_json.c) ---- */
/* Appends str(v) (repr for items inside containers), as Python prints it. */
int tpl_to_str(struct tpl_render *r, const struct tv *v, struct tpl_buf *b);
int tpl_str_value(struct tpl_render *r, const struct tv *v, struct tv *out); /* str(v) */
int tpl_repr(struct tpl_render *r, const struct tv *v, struct tpl_buf *b, int depth);
void tpl_fmt_float(double f, char *buf, size_t cap); /* Python repr(float) */
int tpl_py_isspace(uint32_t cp);
/* Decodes the code point at s[*i] (valid UTF-8) and advances *i. */
uint32_t tpl_utf8_next(const char *s, size_t *i);
size_t tpl_utf8_put(uint32_t cp, char *out); /* 1..4 bytes */
/* Byte offset of code point index k in s (k <= n_cp). */
size_t tpl_utf8_offset(const struct tv_str *s, size_t k);

struct tpl_json_opts {
    int ensure_ascii;
    int sort_keys;
    int indent;             /* < 0: no indent */
    const char *indent_str; /* when not NULL, used instead of indent spaces */
    const char *item_sep;   /* default ", " (or "," with indent) */
    const char *key_sep;    /* default ": " */
    int allow_nan;          /* 0: NaN and infinities are an error (valid JSON only) */
};
/* json.dumps(v) as transformers' tojson filter does it. */
int tpl_to_json(struct tpl_render *r, int line, const struct tv *v, const struct tpl_json_opts *o,
                struct tpl_buf *b);
/* JSON text to a value: integers stay ints and numbers with a fraction or exponent floats.
 * -1 on invalid JSON (why set). */
int tpl_from_json(const char *s, size_t len, struct tv *out, const char **why);

#endif
