/* chat/tpl_lex.c: the template lexer. It reproduces jinja2's tokenizer with transformers'
 * settings: trim_blocks (drop the newline after a block or comment tag), lstrip_blocks (drop
 * the indentation before a block or comment tag that starts a line), `-` to strip whitespace
 * and `+` to keep it, raw blocks, and balanced brackets inside tags, so `{{ {'a': {}} }}`
 * ends at the last `}}`. Also the arena that holds tokens and the AST. */
#include "chat/tpl_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ---- */

struct tpl_chunk {
    struct tpl_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
};

void *tpl_arena_alloc(struct tpl_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    struct tpl_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->mem + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *tpl_arena_strdup(struct tpl_arena *a, const char *s, size_t n) {
    char *p = tpl_arena_alloc(a, n + 1);
    if (p && n) memcpy(p, s, n);
    return p;
}

int tpl_arena_str(struct tpl_arena *a, const char *s, size_t n, struct tv *out) {
    struct tv_str *p = tpl_arena_alloc(a, sizeof *p + n + 1);
    if (!p) return -1;
    p->rc = -1; /* immortal: freed with the arena */
    p->len = n;
    size_t n_cp = 0, hi = 0;
    for (size_t i = 0; i < n; i++) {
        n_cp += ((unsigned char)s[i] & 0xC0) != 0x80;
        hi |= (unsigned char)s[i] & 0x80;
    }
    p->n_cp = n_cp;
    p->ascii = !hi;
    if (n) memcpy(p->s, s, n);
    p->s[n] = 0;
    out->t = TV_STR;
    out->u.s = p;
    return 0;
}

void tpl_arena_free(struct tpl_arena *a) {
    struct tpl_chunk *c = a->head;
    while (c) {
        struct tpl_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}

/* ---- source ---- */

char *tpl_normalize(struct tpl_arena *a, const char *src, size_t len, size_t *out_len) {
    char *p = tpl_arena_alloc(a, len + 1);
    if (!p) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            p[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            p[n++] = src[i];
        }
    }
    if (n && p[n - 1] == '\n') n--;
    p[n] = 0;
    *out_len = n;
    return p;
}

/* ---- lexer ---- */

struct lexer {
    const char *s;
    size_t n, pos;
    int line;
    size_t line_start;
    struct tpl_arena *a;
    struct tpl_tokens *out;
    char *err;
    size_t err_cap;
};

static int lex_fail(struct lexer *L, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int lex_fail(struct lexer *L, size_t at, const char *fmt, ...) {
    int line = 1;
    size_t ls = 0;
    for (size_t i = 0; i < at && i < L->n; i++)
        if (L->s[i] == '\n') line++, ls = i + 1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(L->err, L->err_cap, "template syntax error at line %d, column %zu: %s", line,
             at - ls + 1, msg);
    return -1;
}

static void advance_lines(struct lexer *L, size_t to) {
    if (to <= L->pos) return;
    for (size_t i = L->pos; i < to; i++)
        if (L->s[i] == '\n') L->line++, L->line_start = i + 1;
    L->pos = to;
}

static struct tpl_token *emit(struct lexer *L, int type, size_t at) {
    struct tpl_tokens *t = L->out;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        struct tpl_token *v = realloc(t->v, cap * sizeof *v);
        if (!v) return NULL;
        t->v = v;
        t->cap = cap;
    }
    struct tpl_token *k = &t->v[t->n++];
    memset(k, 0, sizeof *k);
    k->type = (uint8_t)type;
    if (at > L->pos) advance_lines(L, at);
    k->line = L->line;
    k->col = (int)(at - L->line_start + 1);
    return k;
}

/* Length of the whitespace character at s[i] (Python's str.isspace), 0 if none. */
static size_t space_at(const char *s, size_t n, size_t i) {
    if (i >= n) return 0;
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) return (c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f)) ? 1 : 0;
    size_t j = i;
    uint32_t cp = tpl_utf8_next(s, &j);
    return tpl_py_isspace(cp) ? j - i : 0;
}

static size_t skip_space(const char *s, size_t n, size_t i) {
    size_t k;
    while ((k = space_at(s, n, i))) i += k;
    return i;
}

/* End of text s[from..to) once trailing whitespace is removed. */
static size_t rstrip_end(const char *s, size_t from, size_t to) {
    size_t end = to;
    while (end > from) {
        size_t b = end - 1;
        while (b > from && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
        if (space_at(s, to, b) != end - b) break;
        end = b;
    }
    return end;
}

/* Applies `-` / lstrip_blocks to the data s[from..to) before a tag; returns its new end.
 * lstrip_blocks strips the whitespace between the last newline (or the start of a line) and
 * the tag, when nothing else is there. */
static size_t strip_before(struct lexer *L, size_t from, size_t to, char sign, int lstrip,
                           int line_starting) {
    if (sign == '-') return rstrip_end(L->s, from, to);
    if (sign == '+' || !lstrip) return to;
    size_t lpos = from;
    for (size_t i = to; i > from; i--)
        if (L->s[i - 1] == '\n') {
            lpos = i;
            break;
        }
    if (lpos == from && !line_starting) return to;
    if (to > lpos && skip_space(L->s, to, lpos) == to) return lpos;
    return to;
}

static int emit_data(struct lexer *L, size_t from, size_t to) {
    if (to <= from) return 0;
    struct tpl_token *k = emit(L, TK_DATA, from);
    if (!k) return -1;
    k->s = L->s + from;
    k->len = to - from;
    return 0;
}

/* Position after a tag end: trim_blocks drops one newline, `-` all whitespace. */
static size_t after_end(struct lexer *L, size_t end, char sign, int trim) {
    if (sign == '-') return skip_space(L->s, L->n, end);
    if (sign != '+' && trim && end < L->n && L->s[end] == '\n') return end + 1;
    return end;
}

/* Matches `{%[-+]?\s*raw\s*(-%}|%})` at i; returns the position after it or 0. */
static size_t match_raw_begin(struct lexer *L, size_t i, char *end_sign) {
    size_t p = i + 2;
    if (p < L->n && (L->s[p] == '-' || L->s[p] == '+')) p++;
    p = skip_space(L->s, L->n, p);
    if (p + 3 > L->n || memcmp(L->s + p, "raw", 3)) return 0;
    p = skip_space(L->s, L->n, p + 3);
    *end_sign = 0;
    if (p + 3 <= L->n && !memcmp(L->s + p, "-%}", 3)) {
        *end_sign = '-';
        return p + 3;
    }
    if (p + 2 <= L->n && !memcmp(L->s + p, "%}", 2)) return p + 2;
    return 0;
}

static int lex_raw(struct lexer *L, size_t body, int *line_starting) {
    for (size_t i = body; i + 1 < L->n; i++) {
        if (L->s[i] != '{' || L->s[i + 1] != '%') continue;
        size_t p = i + 2;
        char sign = 0;
        if (p < L->n && (L->s[p] == '-' || L->s[p] == '+')) sign = L->s[p++];
        p = skip_space(L->s, L->n, p);
        if (p + 6 > L->n || memcmp(L->s + p, "endraw", 6)) continue;
        p = skip_space(L->s, L->n, p + 6);
        char esign = 0;
        if (p + 3 <= L->n && (L->s[p] == '-' || L->s[p] == '+') && !memcmp(L->s + p + 1, "%}", 2))
            esign = L->s[p++];
        if (p + 2 > L->n || memcmp(L->s + p, "%}", 2)) continue;
        size_t end = strip_before(L, body, i, sign, 1, *line_starting);
        if (emit_data(L, body, end)) return -1;
        size_t next = after_end(L, p + 2, esign, 1);
        *line_starting = next > 0 && L->s[next - 1] == '\n';
        advance_lines(L, next);
        return 0;
    }
    return lex_fail(L, body, "missing end of raw directive");
}

static const struct {
    const char *s;
    uint8_t op;
} OPS[] = {
    {"**", OP_POW},     {"//", OP_FLOORDIV}, {"==", OP_EQ},    {"!=", OP_NE},    {">=", OP_GE},
    {"<=", OP_LE},      {"+", OP_ADD},       {"-", OP_SUB},    {"*", OP_MUL},    {"/", OP_DIV},
    {"%", OP_MOD},      {"~", OP_TILDE},     {"(", OP_LPAREN}, {")", OP_RPAREN}, {"[", OP_LBRACKET},
    {"]", OP_RBRACKET}, {"{", OP_LBRACE},    {"}", OP_RBRACE}, {",", OP_COMMA},  {".", OP_DOT},
    {":", OP_COLON},    {"|", OP_PIPE},      {"=", OP_ASSIGN}, {"<", OP_LT},     {">", OP_GT},
    {";", OP_SEMI},
};

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}
static int is_name0(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string literal at i, decoded with Python's escapes (\n \t \\ \' \xNN \uNNNN \UNNNNNNNN,
 * octal; unknown escapes stay as written). */
static int lex_string(struct lexer *L, size_t i, size_t *next, struct tpl_token *k) {
    char q = L->s[i];
    size_t j = i + 1;
    while (j < L->n && L->s[j] != q) j += L->s[j] == '\\' ? 2 : 1;
    if (j >= L->n) return lex_fail(L, i, "unterminated string");
    char *o = tpl_arena_alloc(L->a, j - i + 1);
    if (!o) return lex_fail(L, i, "out of memory");
    size_t n = 0;
    for (size_t p = i + 1; p < j; p++) {
        char c = L->s[p];
        if (c != '\\') {
            o[n++] = c;
            continue;
        }
        char e = L->s[++p];
        uint32_t cp = 0;
        int digits = 0;
        switch (e) {
        case '\n':
            continue;
        case '\\':
            o[n++] = '\\';
            continue;
        case '\'':
            o[n++] = '\'';
            continue;
        case '"':
            o[n++] = '"';
            continue;
        case 'a':
            o[n++] = '\a';
            continue;
        case 'b':
            o[n++] = '\b';
            continue;
        case 'f':
            o[n++] = '\f';
            continue;
        case 'n':
            o[n++] = '\n';
            continue;
        case 'r':
            o[n++] = '\r';
            continue;
        case 't':
            o[n++] = '\t';
            continue;
        case 'v':
            o[n++] = '\v';
            continue;
        case 'x':
            digits = 2;
            break;
        case 'u':
            digits = 4;
            break;
        case 'U':
            digits = 8;
            break;
        default:
            if (e >= '0' && e <= '7') {
                int m = 0;
                while (m < 3 && p < j && L->s[p] >= '0' && L->s[p] <= '7')
                    cp = cp * 8 + (uint32_t)(L->s[p++] - '0'), m++;
                p--;
                n += tpl_utf8_put(cp, o + n);
                continue;
            }
            o[n++] = '\\';
            o[n++] = e;
            continue;
        }
        for (int m = 0; m < digits; m++) {
            int h = p + 1 < j ? hexval(L->s[p + 1]) : -1;
            if (h < 0) return lex_fail(L, p, "truncated \\%c escape in a string", e);
            cp = cp * 16 + (uint32_t)h;
            p++;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return lex_fail(L, p, "escape outside the Unicode range or a surrogate");
        n += tpl_utf8_put(cp, o + n);
    }
    k->type = TK_STRING;
    k->s = o;
    k->len = n;
    *next = j + 1;
    return 0;
}

static size_t digits_run(const char *s, size_t n, size_t i, int base) {
    /* (_?d)* after a first digit; returns the end */
    while (i < n) {
        size_t j = i + (s[i] == '_');
        int h = j < n ? hexval(s[j]) : -1;
        if (h < 0 || h >= base) break;
        i = j + 1;
    }
    return i;
}

/* A number at i as jinja2's float_re / integer_re read it. */
static int lex_number(const char *s, size_t n, size_t i, int after_dot, size_t *next,
                      struct tpl_token *k) {
    if (s[i] == '0' && i + 1 < n && s[i + 1] && strchr("bBoOxX", s[i + 1])) {
        int base = (s[i + 1] | 32) == 'b' ? 2 : (s[i + 1] | 32) == 'o' ? 8 : 16;
        size_t p = i + 2; /* each digit may be preceded by one '_' */
        int64_t v = 0;
        int any = 0;
        while (p < n) {
            size_t q = p + (s[p] == '_');
            int h = q < n ? hexval(s[q]) : -1;
            if (h < 0 || h >= base) break;
            if (v > (INT64_MAX - h) / base) return -1;
            v = v * base + h;
            any = 1;
            p = q + 1;
        }
        if (any) {
            k->type = TK_INT;
            k->i = v;
            *next = p;
            return 0;
        }
    }
    size_t end = digits_run(s, n, i + 1, 10);
    int is_float = 0;
    if (!after_dot) {
        size_t p = end;
        if (p + 1 < n && s[p] == '.' && is_digit(s[p + 1])) {
            p = digits_run(s, n, p + 2, 10);
            is_float = 1;
        }
        if (p < n && (s[p] | 32) == 'e') {
            size_t q = p + 1;
            if (q < n && (s[q] == '+' || s[q] == '-')) q++;
            if (q < n && is_digit(s[q])) {
                p = digits_run(s, n, q + 1, 10);
                is_float = 1;
            }
        }
        if (is_float) end = p;
    }
    char buf[128];
    size_t m = 0;
    for (size_t p = i; p < end && m + 1 < sizeof buf; p++)
        if (s[p] != '_') buf[m++] = s[p];
    buf[m] = 0;
    if (end - i >= sizeof buf) return -1;
    if (is_float) {
        k->type = TK_FLOAT;
        k->f = strtod(buf, NULL);
    } else {
        if (s[i] == '0') {
            /* jinja2 reads 0, 00, 0_0 as zero and stops before other digits */
            size_t p = i + 1;
            while (p < n && (s[p] == '0' || (s[p] == '_' && p + 1 < n && s[p + 1] == '0'))) p++;
            end = p;
            k->type = TK_INT;
            k->i = 0;
            *next = end;
            return 0;
        }
        errno = 0;
        long long v = strtoll(buf, NULL, 10);
        if (errno) {
            k->type = TK_FLOAT; /* past int64: Python keeps the exact integer; we keep a float */
            k->f = strtod(buf, NULL);
        } else {
            k->type = TK_INT;
            k->i = v;
        }
    }
    *next = end;
    return 0;
}

/* Tokens of one {{ }} or {% %} tag starting at i (after the opening sign); returns the
 * position after the tag end. */
static int lex_tag(struct lexer *L, size_t i, int block, size_t *next, int *line_starting) {
    int stack[256];
    int depth = 0;
    size_t open = i;
    while (1) {
        i = skip_space(L->s, L->n, i);
        if (i >= L->n)
            return lex_fail(L, open, "unexpected end of template, expected '%s'",
                            block ? "%}" : "}}");
        const char *p = L->s + i;
        size_t left = L->n - i;
        if (depth == 0) {
            char sign = 0;
            size_t endlen = 0;
            if (block) {
                if (left >= 3 && (p[0] == '-' || p[0] == '+') && p[1] == '%' && p[2] == '}')
                    sign = p[0], endlen = 3;
                else if (left >= 2 && p[0] == '%' && p[1] == '}')
                    endlen = 2;
            } else {
                if (left >= 3 && p[0] == '-' && p[1] == '}' && p[2] == '}')
                    sign = '-', endlen = 3;
                else if (left >= 2 && p[0] == '}' && p[1] == '}')
                    endlen = 2;
            }
            if (endlen) {
                if (!emit(L, block ? TK_BLOCK_END : TK_VAR_END, i)) return -1;
                *next = after_end(L, i + endlen, sign, block);
                *line_starting = *next > 0 && L->s[*next - 1] == '\n';
                return 0;
            }
        }
        struct tpl_token tk = {0};
        size_t end = 0;
        if (is_digit(*p)) {
            int after_dot = i > 0 && L->s[i - 1] == '.';
            if (lex_number(L->s, L->n, i, after_dot, &end, &tk))
                return lex_fail(L, i, "invalid number");
        } else if (is_name0(*p)) {
            end = i;
            while (end < L->n && (is_name0(L->s[end]) || is_digit(L->s[end]))) end++;
            tk.type = TK_NAME;
            tk.s = p;
            tk.len = end - i;
        } else if (*p == '\'' || *p == '"') {
            if (lex_string(L, i, &end, &tk)) return -1;
        } else {
            for (size_t k = 0; k < sizeof OPS / sizeof *OPS; k++) {
                size_t m = strlen(OPS[k].s);
                if (left >= m && !memcmp(p, OPS[k].s, m)) {
                    tk.type = TK_OP;
                    tk.op = OPS[k].op;
                    end = i + m;
                    break;
                }
            }
            if (!end) {
                if (*p >= 0x20 && *p < 0x7f) return lex_fail(L, i, "unexpected char '%c'", *p);
                return lex_fail(L, i, "unexpected byte 0x%02x", (unsigned char)*p);
            }
            if (tk.op == OP_LPAREN || tk.op == OP_LBRACKET || tk.op == OP_LBRACE) {
                if (depth == (int)(sizeof stack / sizeof *stack))
                    return lex_fail(L, i, "brackets nested too deeply");
                stack[depth++] = tk.op;
            } else if (tk.op == OP_RPAREN || tk.op == OP_RBRACKET || tk.op == OP_RBRACE) {
                int want = tk.op == OP_RPAREN     ? OP_LPAREN
                           : tk.op == OP_RBRACKET ? OP_LBRACKET
                                                  : OP_LBRACE;
                if (!depth) return lex_fail(L, i, "unexpected '%c'", *p);
                if (stack[depth - 1] != want)
                    return lex_fail(L, i, "unexpected '%c', expected a closing bracket first", *p);
                depth--;
            }
        }
        struct tpl_token *k = emit(L, tk.type, i);
        if (!k) return -1;
        int line = k->line, col = k->col;
        *k = tk;
        k->line = line;
        k->col = col;
        i = end;
    }
}

int tpl_lex(const char *src, size_t len, struct tpl_arena *a, struct tpl_tokens *out, char *err,
            size_t err_cap) {
    struct lexer L = {
        .s = src, .n = len, .line = 1, .a = a, .out = out, .err = err, .err_cap = err_cap};
    int line_starting = 1;
    size_t pos = 0;
    while (pos < len) {
        size_t tag = pos;
        while (tag + 1 < len && !(src[tag] == '{' && (src[tag + 1] == '{' || src[tag + 1] == '%' ||
                                                      src[tag + 1] == '#')))
            tag++;
        if (tag + 1 >= len) {
            if (emit_data(&L, pos, len)) goto oom;
            break;
        }
        char kind = src[tag + 1];
        char sign =
            tag + 2 < len && (src[tag + 2] == '-' || src[tag + 2] == '+') ? src[tag + 2] : 0;
        char raw_sign = 0;
        size_t raw_body = kind == '%' ? match_raw_begin(&L, tag, &raw_sign) : 0;
        size_t end = strip_before(&L, pos, tag, sign, kind != '{', line_starting);
        if (emit_data(&L, pos, end)) goto oom;
        advance_lines(&L, tag);
        if (raw_body) {
            size_t body = after_end(&L, raw_body, raw_sign, 0);
            line_starting = body > 0 && src[body - 1] == '\n';
            advance_lines(&L, body);
            if (lex_raw(&L, body, &line_starting)) return -1;
            pos = L.pos;
            continue;
        }
        size_t inner = tag + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t e = inner;
            while (e + 1 < len && !(src[e] == '#' && src[e + 1] == '}')) e++;
            if (e + 1 >= len) return lex_fail(&L, tag, "missing end of comment tag");
            char esign = e > inner && (src[e - 1] == '-' || src[e - 1] == '+') ? src[e - 1] : 0;
            size_t next = after_end(&L, e + 2, esign, 1);
            line_starting = next > 0 && src[next - 1] == '\n';
            advance_lines(&L, next);
            pos = next;
            continue;
        }
        if (!emit(&L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, tag)) goto oom;
        size_t next;
        if (lex_tag(&L, inner, kind == '%', &next, &line_starting)) {
            if (!*err) goto oom;
            return -1;
        }
        advance_lines(&L, next);
        pos = next;
    }
    if (!emit(&L, TK_EOF, len)) goto oom;
    return 0;
oom:
    snprintf(err, err_cap, "out of memory while reading the template");
    return -1;
}
