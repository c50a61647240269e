/* chat/tpl_val.h: the value type of the template engine (internal to src/chat).
 * A struct tv is a small tagged value passed by copy: undefined, none, bool, int, float, or a
 * pointer to a refcounted heap object (string, list, dict, function, loop). Values are
 * immutable once built, except namespaces (a dict kind) whose attributes `set ns.x = ...`
 * replaces. Ownership: a function that returns a struct tv through an out parameter hands the
 * caller one reference, released with tv_drop(); arguments are borrowed. Objects with a
 * negative refcount are immortal (constants inside a parsed template), so a template may be
 * rendered by several threads at once. Live bytes are charged to a per-thread budget while a
 * render runs (tv_budget_begin/end); an allocation over budget fails like out-of-memory. */
#ifndef DSPARK_CHAT_TPL_VAL_H
#define DSPARK_CHAT_TPL_VAL_H

#include <stddef.h>
#include <stdint.h>

enum tv_type {
    TV_UNDEF, /* jinja2 Undefined: prints "", is falsy, iterates as empty */
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,
    TV_LIST, /* list, tuple, generator, dict views, range: see enum tv_list_kind */
    TV_DICT, /* dict or namespace: see enum tv_dict_kind */
    TV_FUNC, /* macro, builtin function or bound method */
    TV_LOOP, /* the `loop` object of a for loop */
};

enum tv_list_kind { TL_LIST, TL_TUPLE, TL_GEN, TL_ITEMS, TL_KEYS, TL_VALUES, TL_RANGE };
enum tv_dict_kind { TD_DICT, TD_NS };

struct tv_str {
    int32_t rc;
    uint8_t markup; /* jinja2 Markup (from safe/escape): `+` escapes the other operand */
    uint8_t ascii;  /* every byte < 0x80: byte index = character index */
    size_t len;     /* bytes, not counting the NUL */
    size_t n_cp;    /* code points (Python's len) */
    char s[];       /* UTF-8, NUL-terminated */
};

struct tv {
    uint8_t t; /* enum tv_type */
    union {
        int64_t i; /* TV_INT, TV_BOOL (0/1) */
        double f;
        struct tv_str *s;
        struct tv_list *l;
        struct tv_dict *d;
        struct tv_func *fn;
        struct tv_loop *loop;
        const char *hint; /* TV_UNDEF: the name that was missing (static text) or NULL */
    } u;
};

struct tv_list {
    int32_t rc;
    uint8_t kind;   /* enum tv_list_kind */
    uint16_t depth; /* nesting depth of lists/dicts below and including this one */
    size_t n, cap;
    struct tv *v;
    int64_t range[3];   /* TL_RANGE: start, stop, step (for printing) */
    struct tv_str *err; /* TL_GEN: the error iterating it raises (jinja2's generator filters fail
                           lazily, when consumed), or NULL */
};

struct tv_dict {
    int32_t rc;
    uint8_t kind;
    uint16_t depth;
    size_t n, cap;
    struct tv *k, *v; /* insertion order */
    uint32_t *index;  /* open addressing over entries + 1 (0 = empty); NULL while n is small */
    size_t index_cap;
};

struct tv_func;
struct tv_loop;

#define TV_MAX_DEPTH 512

/* ---- construction ---- */
static inline struct tv tv_undef(const char *hint) {
    struct tv v = {.t = TV_UNDEF};
    v.u.hint = hint;
    return v;
}
static inline struct tv tv_none(void) {
    return (struct tv){.t = TV_NONE};
}
static inline struct tv tv_bool(int b) {
    struct tv v = {.t = TV_BOOL};
    v.u.i = b != 0;
    return v;
}
static inline struct tv tv_int(int64_t i) {
    struct tv v = {.t = TV_INT};
    v.u.i = i;
    return v;
}
static inline struct tv tv_float(double f) {
    struct tv v = {.t = TV_FLOAT};
    v.u.f = f;
    return v;
}

/* Strings: 0 on success, -1 when out of memory (or over budget). s must be valid UTF-8. */
int tv_str_new(const char *s, size_t len, struct tv *out);
int tv_str_cat(const struct tv_str *a, const struct tv_str *b, struct tv *out);
static inline int tv_str_c(const char *s, struct tv *out);

int tv_list_new(enum tv_list_kind kind, size_t cap, struct tv *out);
/* Appends v (consumed: the list takes the reference, also on failure). */
int tv_list_push(struct tv *list, struct tv v);
int tv_dict_new(enum tv_dict_kind kind, size_t cap, struct tv *out);
/* Sets key to val, replacing an equal key in place (dict order keeps the first position).
 * Both are consumed. -1 on out of memory or an unhashable key (*unhashable then set). */
int tv_dict_set(struct tv *dict, struct tv key, struct tv val, int *unhashable);
/* Borrowed pointer to the value of key, or NULL. */
struct tv *tv_dict_get(const struct tv_dict *d, const struct tv *key);
struct tv *tv_dict_get_str(const struct tv_dict *d, const char *key, size_t len);

/* ---- references ---- */
struct tv tv_ref(struct tv v); /* returns v with one more reference */
void tv_drop(struct tv *v);    /* releases and sets *v to undefined */

/* ---- properties ---- */
int tv_truthy(const struct tv *v);
int tv_is_str(const struct tv *v);
int tv_is_number(const struct tv *v); /* bool, int or float */
int tv_hashable(const struct tv *v);
/* Python ==: numbers by value, strings by bytes, lists/tuples/dicts deeply, the rest by
 * identity. Undefined equals only undefined. */
int tv_equal(const struct tv *a, const struct tv *b);
/* Python <: 0/1 in *lt; -1 when the types do not compare (TypeError). */
int tv_less(const struct tv *a, const struct tv *b, int *lt);
/* Length as Python's len(): -1 when the value has none. */
int64_t tv_len(const struct tv *v);
/* How deep lists, dicts, loops and bound methods nest below v: at most TV_MAX_DEPTH, which
 * tv_list_push and tv_dict_set enforce (so freeing and printing never recurse further). */
unsigned tv_depth(const struct tv *v);
/* 1 (once) when the last failed push/set was refused for depth. */
int tv_take_too_deep(void);

/* ---- per-thread allocation budget ---- */
struct tv_budget {
    size_t used, cap;
};
void tv_budget_begin(struct tv_budget *b); /* charges this thread's allocations to b */
void tv_budget_end(void);
void *tv_alloc(size_t n);
void *tv_realloc(void *p, size_t old_n, size_t new_n);
void tv_free(void *p, size_t n);

static inline int tv_str_c(const char *s, struct tv *out) {
    size_t n = 0;
    while (s[n]) n++;
    return tv_str_new(s, n, out);
}

#endif
