/* chat/tpl_str.c: how values become text, byte for byte as Python prints them: str() of
 * True/False/None, floats in repr's shortest round-trip form (1.0, 1e+16, 1e-05), lists and
 * dicts through repr() of their items ('a', "it's", '\n', '\xa0'), tuples, namespaces and
 * loop objects. Also UTF-8 decoding, Python's whitespace set and HTML escaping (Markup). */
#include "chat/tpl_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- UTF-8 ---- */

uint32_t tpl_utf8_next(const char *s, size_t *i) {
    const unsigned char *p = (const unsigned char *)s + *i;
    if (p[0] < 0x80) {
        *i += 1;
        return p[0];
    }
    if (p[0] < 0xE0) {
        *i += 2;
        return (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
    }
    if (p[0] < 0xF0) {
        *i += 3;
        return (uint32_t)(p[0] & 0x0F) << 12 | (uint32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
    }
    *i += 4;
    return (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3F) << 12 |
           (uint32_t)(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
}

size_t tpl_utf8_put(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t tpl_utf8_offset(const struct tv_str *s, size_t k) {
    if (s->ascii || k == 0) return k < s->len ? k : s->len;
    if (k >= s->n_cp) return s->len;
    size_t i = 0;
    while (k--) tpl_utf8_next(s->s, &i);
    return i;
}

int tpl_py_isspace(uint32_t cp) {
    return (cp >= 9 && cp <= 13) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

static int py_isprintable(uint32_t cp) {
    if (cp < 0x80) return cp >= 0x20 && cp < 0x7F;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
        return 0;
    default:
        return 1;
    }
}

/* ---- numbers ---- */

void tpl_fmt_float(double f, char *buf, size_t cap) {
    if (isnan(f)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e is "-d.ddde+XX": collect the digits and the decimal point position */
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    const char *q = e + neg;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int decpt = atoi(q + 1) + 1;
    char *o = buf;
    size_t left = cap;
#define OUT(...)                                                                                   \
    do {                                                                                           \
        int w_ = snprintf(o, left, __VA_ARGS__);                                                   \
        if (w_ > 0 && (size_t)w_ < left) o += w_, left -= (size_t)w_;                              \
    } while (0)
    if (neg) OUT("-");
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            OUT("0.");
            for (int z = 0; z < -decpt; z++) OUT("0");
            OUT("%s", digits);
        } else if (decpt >= nd) {
            OUT("%s", digits);
            for (int z = 0; z < decpt - nd; z++) OUT("0");
            OUT(".0");
        } else {
            OUT("%.*s.%s", decpt, digits, digits + decpt);
        }
    } else {
        OUT("%c", digits[0]);
        if (nd > 1) OUT(".%s", digits + 1);
        OUT("e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
    }
#undef OUT
}

/* ---- str() and repr() ---- */

static int put(struct tpl_render *r, struct tpl_buf *b, const char *s) {
    return tpl_buf_put(r, b, s, strlen(s));
}

static int repr_str(struct tpl_render *r, const struct tv_str *s, struct tpl_buf *b) {
    int has_sq = memchr(s->s, '\'', s->len) != NULL, has_dq = memchr(s->s, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (s->markup && put(r, b, "Markup(")) return -1;
    if (tpl_buf_put(r, b, &q, 1)) return -1;
    size_t run = 0;
    for (size_t i = 0; i < s->len;) {
        size_t a = i;
        uint32_t cp = tpl_utf8_next(s->s, &i);
        char esc[16];
        esc[0] = 0;
        if (cp == (uint32_t)q || cp == '\\')
            snprintf(esc, sizeof esc, "\\%c", (char)cp);
        else if (cp == '\t')
            snprintf(esc, sizeof esc, "\\t");
        else if (cp == '\n')
            snprintf(esc, sizeof esc, "\\n");
        else if (cp == '\r')
            snprintf(esc, sizeof esc, "\\r");
        else if (!py_isprintable(cp))
            snprintf(esc, sizeof esc,
                     cp <= 0xFF     ? "\\x%02x"
                     : cp <= 0xFFFF ? "\\u%04x"
                                    : "\\U%08x",
                     (unsigned)cp);
        if (!esc[0]) {
            run += i - a;
            continue;
        }
        if (tpl_buf_put(r, b, s->s + a - run, run) || put(r, b, esc)) return -1;
        run = 0;
    }
    if (tpl_buf_put(r, b, s->s + s->len - run, run) || tpl_buf_put(r, b, &q, 1)) return -1;
    return s->markup ? put(r, b, ")") : 0;
}

static int scalar(struct tpl_render *r, const struct tv *v, struct tpl_buf *b) {
    char tmp[64];
    switch (v->t) {
    case TV_NONE:
        return put(r, b, "None");
    case TV_BOOL:
        return put(r, b, v->u.i ? "True" : "False");
    case TV_INT:
        snprintf(tmp, sizeof tmp, "%" PRId64, v->u.i);
        return put(r, b, tmp);
    case TV_FLOAT:
        tpl_fmt_float(v->u.f, tmp, sizeof tmp);
        return put(r, b, tmp);
    default:
        return 1;
    }
}

static int items_repr(struct tpl_render *r, const struct tv_list *l, struct tpl_buf *b, int depth,
                      const char *open, const char *close) {
    if (put(r, b, open)) return -1;
    for (size_t i = 0; i < l->n; i++) {
        if (i && put(r, b, ", ")) return -1;
        if (tpl_repr(r, &l->v[i], b, depth + 1)) return -1;
    }
    if (l->kind == TL_TUPLE && l->n == 1 && put(r, b, ",")) return -1;
    return put(r, b, close);
}

static int dict_repr(struct tpl_render *r, const struct tv_dict *d, struct tpl_buf *b, int depth) {
    if (put(r, b, "{")) return -1;
    for (size_t i = 0; i < d->n; i++) {
        if (i && put(r, b, ", ")) return -1;
        if (tpl_repr(r, &d->k[i], b, depth + 1) || put(r, b, ": ") ||
            tpl_repr(r, &d->v[i], b, depth + 1))
            return -1;
    }
    return put(r, b, "}");
}

static int object_str(struct tpl_render *r, const struct tv *v, struct tpl_buf *b, int depth) {
    char tmp[160];
    if (depth > TV_MAX_DEPTH) return tpl_fail(r, 0, "values nested too deeply to print");
    if (tpl_step(r, 0, 1)) return -1;
    switch (v->t) {
    case TV_LIST: {
        const struct tv_list *l = v->u.l;
        switch (l->kind) {
        case TL_TUPLE:
            return items_repr(r, l, b, depth, "(", ")");
        case TL_GEN:
            return put(r, b, "<generator object generator at 0x0>");
        case TL_ITEMS:
            return items_repr(r, l, b, depth, "dict_items([", "])");
        case TL_KEYS:
            return items_repr(r, l, b, depth, "dict_keys([", "])");
        case TL_VALUES:
            return items_repr(r, l, b, depth, "dict_values([", "])");
        case TL_RANGE:
            if (l->range[2] == 1)
                snprintf(tmp, sizeof tmp, "range(%" PRId64 ", %" PRId64 ")", l->range[0],
                         l->range[1]);
            else
                snprintf(tmp, sizeof tmp, "range(%" PRId64 ", %" PRId64 ", %" PRId64 ")",
                         l->range[0], l->range[1], l->range[2]);
            return put(r, b, tmp);
        default:
            return items_repr(r, l, b, depth, "[", "]");
        }
    }
    case TV_DICT:
        if (v->u.d->kind == TD_NS)
            return put(r, b, "<Namespace ") || dict_repr(r, v->u.d, b, depth) || put(r, b, ">") ? -1
                                                                                                : 0;
        return dict_repr(r, v->u.d, b, depth);
    case TV_FUNC:
        if (v->u.fn->kind == FN_MACRO)
            snprintf(tmp, sizeof tmp, "<Macro '%.100s'>", v->u.fn->name);
        else
            snprintf(tmp, sizeof tmp, "<built-in method %.100s>", v->u.fn->name);
        return put(r, b, tmp);
    case TV_LOOP:
        snprintf(tmp, sizeof tmp, "<LoopContext %zu/%zu>", v->u.loop->i + 1,
                 v->u.loop->items.u.l->n);
        return put(r, b, tmp);
    default:
        return put(r, b, "<object>");
    }
}

int tpl_repr(struct tpl_render *r, const struct tv *v, struct tpl_buf *b, int depth) {
    if (v->t == TV_STR) return repr_str(r, v->u.s, b);
    if (v->t == TV_UNDEF) return put(r, b, "Undefined");
    int rc = scalar(r, v, b);
    return rc <= 0 ? rc : object_str(r, v, b, depth);
}

int tpl_to_str(struct tpl_render *r, const struct tv *v, struct tpl_buf *b) {
    if (v->t == TV_STR) return tpl_buf_put(r, b, v->u.s->s, v->u.s->len);
    if (v->t == TV_UNDEF) return 0;
    int rc = scalar(r, v, b);
    return rc <= 0 ? rc : object_str(r, v, b, 0);
}

int tpl_str_value(struct tpl_render *r, const struct tv *v, struct tv *out) {
    if (v->t == TV_STR) {
        *out = tv_ref(*v);
        return 0;
    }
    struct tpl_buf b = {0};
    int rc = tpl_to_str(r, v, &b);
    if (!rc && tv_str_new(b.p ? b.p : "", b.n, out)) rc = tpl_oom(r, 0);
    tpl_buf_free(&b);
    return rc;
}

/* HTML-escapes str(v) into a Markup string (markupsafe.escape); Markup passes through. */
int tpl_escape_str(struct tpl_render *r, const struct tv *v, struct tv *out) {
    if (v->t == TV_STR && v->u.s->markup) {
        *out = tv_ref(*v);
        return 0;
    }
    struct tv s;
    if (tpl_str_value(r, v, &s)) return -1;
    struct tpl_buf b = {0};
    int rc = 0;
    for (size_t i = 0; i < s.u.s->len && !rc; i++) {
        char c = s.u.s->s[i];
        const char *e = c == '&'    ? "&amp;"
                        : c == '<'  ? "&lt;"
                        : c == '>'  ? "&gt;"
                        : c == '"'  ? "&#34;"
                        : c == '\'' ? "&#39;"
                                    : NULL;
        rc = e ? put(r, &b, e) : tpl_buf_put(r, &b, &c, 1);
    }
    tv_drop(&s);
    if (!rc && tv_str_new(b.p ? b.p : "", b.n, out)) rc = tpl_oom(r, 0);
    if (!rc) out->u.s->markup = 1;
    tpl_buf_free(&b);
    return rc;
}
