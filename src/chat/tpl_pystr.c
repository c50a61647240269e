/* chat/tpl_pystr.c: Python's str algorithms over UTF-8 values, indexed by code point as Python
 * indexes: strip with a character set, split/rsplit (whitespace runs or a separator, with
 * maxsplit), splitlines, replace with a count, find/count within [start:end], case mapping
 * (one code point to one, via utf8proc), and %-formatting. */
#include "chat/tpl_impl.h"

#include "chat/tpl_pystr.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static int new_str(struct tpl_render *r, const char *s, size_t n, struct tv *out) {
    return tv_str_new(s, n, out) ? tpl_oom(r, 0) : 0;
}

/* ---- strip ---- */

static int in_set(uint32_t cp, const struct tv_str *chars) {
    if (!chars) return tpl_py_isspace(cp);
    for (size_t i = 0; i < chars->len;)
        if (tpl_utf8_next(chars->s, &i) == cp) return 1;
    return 0;
}

int tpl_py_strip(struct tpl_render *r, const struct tv_str *s, const struct tv_str *chars, int left,
                 int right, struct tv *out) {
    size_t a = 0, b = s->len;
    while (left && a < b) {
        size_t j = a;
        if (!in_set(tpl_utf8_next(s->s, &j), chars)) break;
        a = j;
    }
    while (right && b > a) {
        size_t k = b - 1;
        while (k > a && ((unsigned char)s->s[k] & 0xC0) == 0x80) k--;
        size_t j = k;
        if (!in_set(tpl_utf8_next(s->s, &j), chars)) break;
        b = k;
    }
    return new_str(r, s->s + a, b - a, out);
}

/* ---- split ---- */

static int push_piece(struct tpl_render *r, struct tv *list, const char *s, size_t n) {
    struct tv p;
    if (new_str(r, s, n, &p)) return -1;
    return tv_list_push(list, p) ? tpl_oom(r, 0) : 0;
}

static size_t space_len(const char *s, size_t n, size_t i) {
    if (i >= n) return 0;
    size_t j = i;
    return tpl_py_isspace(tpl_utf8_next(s, &j)) ? j - i : 0;
}

/* Start of the character that ends at byte b (b > 0). */
static size_t prev_char(const char *s, size_t b) {
    size_t k = b - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    return k;
}

static int split_ws(struct tpl_render *r, const struct tv_str *s, int64_t maxsplit,
                    struct tv *out) {
    size_t i = 0, n = s->len, w;
    while (1) {
        while ((w = space_len(s->s, n, i))) i += w;
        if (i >= n) return 0;
        if (maxsplit == 0) return push_piece(r, out, s->s + i, n - i);
        size_t j = i;
        while (j < n && !space_len(s->s, n, j)) tpl_utf8_next(s->s, &j);
        if (push_piece(r, out, s->s + i, j - i)) return -1;
        if (maxsplit > 0) maxsplit--;
        i = j;
    }
}

static int rsplit_ws(struct tpl_render *r, const struct tv_str *s, int64_t maxsplit,
                     struct tv *out) {
    size_t b = s->len;
    while (1) {
        while (b > 0 && space_len(s->s, s->len, prev_char(s->s, b))) b = prev_char(s->s, b);
        if (b == 0) break;
        if (maxsplit == 0) {
            if (push_piece(r, out, s->s, b)) return -1;
            break;
        }
        size_t a = b;
        while (a > 0 && !space_len(s->s, s->len, prev_char(s->s, a))) a = prev_char(s->s, a);
        if (push_piece(r, out, s->s + a, b - a)) return -1;
        if (maxsplit > 0) maxsplit--;
        b = a;
    }
    struct tv_list *l = out->u.l; /* collected right to left */
    for (size_t i = 0; i < l->n / 2; i++) {
        struct tv t = l->v[i];
        l->v[i] = l->v[l->n - 1 - i];
        l->v[l->n - 1 - i] = t;
    }
    return 0;
}

int tpl_py_split(struct tpl_render *r, int line, const struct tv_str *s, const struct tv_str *sep,
                 int64_t maxsplit, int from_right, struct tv *out) {
    if (tpl_step(r, line, s->len / 16) || tv_list_new(TL_LIST, 0, out))
        return r->failed ? -1 : tpl_oom(r, line);
    int rc;
    if (!sep) {
        rc = from_right ? rsplit_ws(r, s, maxsplit, out) : split_ws(r, s, maxsplit, out);
        return rc ? (tv_drop(out), -1) : 0;
    }
    if (!sep->len) {
        tv_drop(out);
        return tpl_fail(r, line, "empty separator");
    }
    const char *p = s->s, *end = s->s + s->len;
    if (!from_right) {
        while (maxsplit != 0) {
            const char *f = memmem(p, (size_t)(end - p), sep->s, sep->len);
            if (!f) break;
            if (push_piece(r, out, p, (size_t)(f - p))) return tv_drop(out), -1;
            p = f + sep->len;
            if (maxsplit > 0) maxsplit--;
        }
        return push_piece(r, out, p, (size_t)(end - p)) ? (tv_drop(out), -1) : 0;
    }
    const char *e = end;
    while (maxsplit != 0) {
        const char *f = NULL;
        for (const char *q = e - sep->len; q >= p && e - p >= (ptrdiff_t)sep->len; q--)
            if (!memcmp(q, sep->s, sep->len)) {
                f = q;
                break;
            }
        if (!f) break;
        if (push_piece(r, out, f + sep->len, (size_t)(e - f - sep->len))) return tv_drop(out), -1;
        e = f;
        if (maxsplit > 0) maxsplit--;
    }
    if (push_piece(r, out, p, (size_t)(e - p))) return tv_drop(out), -1;
    struct tv_list *l = out->u.l;
    for (size_t i = 0; i < l->n / 2; i++) {
        struct tv t = l->v[i];
        l->v[i] = l->v[l->n - 1 - i];
        l->v[l->n - 1 - i] = t;
    }
    return 0;
}

static int line_break(uint32_t cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
           cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

int tpl_py_splitlines(struct tpl_render *r, const struct tv_str *s, int keepends, struct tv *out) {
    if (tv_list_new(TL_LIST, 0, out)) return tpl_oom(r, 0);
    size_t start = 0, i = 0;
    while (i < s->len) {
        size_t a = i;
        uint32_t cp = tpl_utf8_next(s->s, &i);
        if (!line_break(cp)) continue;
        if (cp == '\r' && i < s->len && s->s[i] == '\n') i++;
        if (push_piece(r, out, s->s + start, (keepends ? i : a) - start)) return tv_drop(out), -1;
        start = i;
    }
    if (start < s->len && push_piece(r, out, s->s + start, s->len - start)) return tv_drop(out), -1;
    return 0;
}

/* ---- search ---- */

/* Python slice bounds [start:end] over n code points, as byte offsets. */
void tpl_py_range(const struct tv_str *s, const struct tv *start, const struct tv *end, size_t *a,
                  size_t *b) {
    int64_t n = (int64_t)s->n_cp, lo = 0, hi = n;
    if (start && (start->t == TV_INT || start->t == TV_BOOL))
        lo = start->u.i < 0 ? start->u.i + n : start->u.i;
    if (end && (end->t == TV_INT || end->t == TV_BOOL)) hi = end->u.i < 0 ? end->u.i + n : end->u.i;
    if (lo < 0) lo = 0;
    if (hi > n) hi = n;
    if (lo > n) lo = n + 1;
    *a = lo > n ? s->len + 1 : tpl_utf8_offset(s, (size_t)lo);
    *b = hi < lo ? *a : tpl_utf8_offset(s, (size_t)hi);
}

static int64_t cp_index(const struct tv_str *s, size_t byte) {
    if (s->ascii) return (int64_t)byte;
    int64_t k = 0;
    for (size_t i = 0; i < byte; i++) k += ((unsigned char)s->s[i] & 0xC0) != 0x80;
    return k;
}

int64_t tpl_py_find(const struct tv_str *s, const struct tv_str *sub, const struct tv *start,
                    const struct tv *end, int from_right) {
    size_t a, b;
    tpl_py_range(s, start, end, &a, &b);
    if (a > s->len || b < a || b - a < sub->len) return -1;
    if (!from_right) {
        const char *f = sub->len ? memmem(s->s + a, b - a, sub->s, sub->len) : s->s + a;
        return f ? cp_index(s, (size_t)(f - s->s)) : -1;
    }
    for (size_t q = b - sub->len + 1; q-- > a;)
        if (!memcmp(s->s + q, sub->s, sub->len)) return cp_index(s, q);
    return -1;
}

int64_t tpl_py_count(const struct tv_str *s, const struct tv_str *sub, const struct tv *start,
                     const struct tv *end) {
    size_t a, b;
    tpl_py_range(s, start, end, &a, &b);
    if (a > s->len || b < a) return 0;
    if (!sub->len) return cp_index(s, b) - cp_index(s, a) + 1;
    int64_t k = 0;
    for (const char *p = s->s + a; (p = memmem(p, (size_t)(s->s + b - p), sub->s, sub->len));
         p += sub->len)
        k++;
    return k;
}

int tpl_py_replace(struct tpl_render *r, int line, const struct tv_str *s, const struct tv_str *old,
                   const struct tv_str *rep, int64_t count, struct tv *out) {
    struct tpl_buf b = {0};
    int rc = 0;
    if (tpl_step(r, line, s->len / 16)) return -1;
    if (!old->len) { /* 'ab'.replace('', '-') == '-a-b-' */
        size_t i = 0;
        while (!rc && count != 0) {
            rc = tpl_buf_put(r, &b, rep->s, rep->len);
            if (count > 0) count--;
            if (i >= s->len) break;
            size_t a = i;
            tpl_utf8_next(s->s, &i);
            if (!rc) rc = tpl_buf_put(r, &b, s->s + a, i - a);
        }
        if (!rc && i < s->len) rc = tpl_buf_put(r, &b, s->s + i, s->len - i);
    } else {
        const char *p = s->s, *end = s->s + s->len, *f;
        while (!rc && count != 0 && (f = memmem(p, (size_t)(end - p), old->s, old->len))) {
            rc = tpl_buf_put(r, &b, p, (size_t)(f - p));
            if (!rc) rc = tpl_buf_put(r, &b, rep->s, rep->len);
            p = f + old->len;
            if (count > 0) count--;
        }
        if (!rc) rc = tpl_buf_put(r, &b, p, (size_t)(end - p));
    }
    if (!rc) rc = new_str(r, b.p ? b.p : "", b.n, out);
    tpl_buf_free(&b);
    return rc;
}

/* ---- case ---- */

static int is_cased(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

uint32_t tpl_py_lower(uint32_t cp) {
    return (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
}

static uint32_t case_map(uint32_t cp, enum tpl_case mode, int first, int prev_cased) {
    utf8proc_int32_t c = (utf8proc_int32_t)cp;
    switch (mode) {
    case CASE_UPPER:
        return (uint32_t)utf8proc_toupper(c);
    case CASE_LOWER:
        return (uint32_t)utf8proc_tolower(c);
    case CASE_SWAP:
        if (utf8proc_isupper(c)) return (uint32_t)utf8proc_tolower(c);
        return utf8proc_islower(c) ? (uint32_t)utf8proc_toupper(c) : cp;
    case CASE_CAPITALIZE:
        return first ? (uint32_t)utf8proc_totitle(c) : (uint32_t)utf8proc_tolower(c);
    case CASE_TITLE:
        return prev_cased ? (uint32_t)utf8proc_tolower(c) : (uint32_t)utf8proc_totitle(c);
    }
    return cp;
}

int tpl_py_case(struct tpl_render *r, const struct tv_str *s, enum tpl_case mode, struct tv *out) {
    struct tpl_buf b = {0};
    size_t i = 0;
    int prev_cased = 0, rc = 0;
    while (i < s->len && !rc) {
        int first = i == 0;
        uint32_t cp = tpl_utf8_next(s->s, &i);
        char tmp[4];
        rc = tpl_buf_put(r, &b, tmp, tpl_utf8_put(case_map(cp, mode, first, prev_cased), tmp));
        prev_cased = is_cased(cp);
    }
    if (!rc) rc = new_str(r, b.p ? b.p : "", b.n, out);
    tpl_buf_free(&b);
    return rc;
}

int tpl_py_pad(struct tpl_render *r, int line, const struct tv_str *s, int64_t width, uint32_t fill,
               int mode, struct tv *out) {
    int64_t len = (int64_t)s->n_cp, marg = width - len;
    if (marg <= 0) return new_str(r, s->s, s->len, out);
    if (marg > (int64_t)r->max_output) return tpl_fail(r, line, "padding too large");
    int64_t left = mode == 0 ? marg / 2 + (marg & width & 1) : mode == 1 ? 0 : marg;
    char f[4];
    size_t fl = tpl_utf8_put(fill, f);
    struct tpl_buf b = {0};
    int rc = 0;
    for (int64_t i = 0; i < left && !rc; i++) rc = tpl_buf_put(r, &b, f, fl);
    if (!rc) rc = tpl_buf_put(r, &b, s->s, s->len);
    for (int64_t i = left; i < marg && !rc; i++) rc = tpl_buf_put(r, &b, f, fl);
    if (!rc) rc = new_str(r, b.p ? b.p : "", b.n, out);
    tpl_buf_free(&b);
    return rc;
}

/* ---- %-formatting ---- */

int tpl_percent_format(struct tpl_render *r, int line, const struct tv_str *fmt,
                       const struct tv *args, struct tv *out) {
    const struct tv *items = args;
    size_t n_items = 1, next = 0;
    int is_map = args->t == TV_DICT && args->u.d->kind == TD_DICT;
    if (args->t == TV_LIST && args->u.l->kind == TL_TUPLE) {
        items = args->u.l->v;
        n_items = args->u.l->n;
    }
    struct tpl_buf b = {0};
    int rc = 0;
    for (size_t i = 0; i < fmt->len && !rc; i++) {
        if (fmt->s[i] != '%') {
            rc = tpl_buf_put(r, &b, fmt->s + i, 1);
            continue;
        }
        if (++i >= fmt->len) {
            rc = tpl_fail(r, line, "incomplete format");
            break;
        }
        const struct tv *arg = NULL;
        if (fmt->s[i] == '(') {
            size_t j = i + 1;
            while (j < fmt->len && fmt->s[j] != ')') j++;
            if (j >= fmt->len || !is_map) {
                rc = tpl_fail(r, line, "format requires a mapping");
                break;
            }
            arg = tv_dict_get_str(args->u.d, fmt->s + i + 1, j - i - 1);
            if (!arg) {
                rc = tpl_fail(r, line, "missing key in format mapping");
                break;
            }
            i = j + 1;
        }
        char spec[32] = "%";
        size_t sn = 1;
        while (i < fmt->len && fmt->s[i] && strchr("-+ #0", fmt->s[i]) && sn < 8)
            spec[sn++] = fmt->s[i++];
        while (i < fmt->len && fmt->s[i] >= '0' && fmt->s[i] <= '9' && sn < 16)
            spec[sn++] = fmt->s[i++];
        if (i < fmt->len && fmt->s[i] == '.') {
            spec[sn++] = fmt->s[i++];
            while (i < fmt->len && fmt->s[i] >= '0' && fmt->s[i] <= '9' && sn < 24)
                spec[sn++] = fmt->s[i++];
        }
        if (i >= fmt->len) {
            rc = tpl_fail(r, line, "incomplete format");
            break;
        }
        char conv = fmt->s[i];
        if (conv == '%') {
            rc = tpl_buf_put(r, &b, "%", 1);
            continue;
        }
        if (!arg) {
            if (is_map)
                arg = args;
            else if (next < n_items)
                arg = &items[next++];
            else {
                rc = tpl_fail(r, line, "not enough arguments for format string");
                break;
            }
        }
        char tmp[512];
        if (conv == 's' || conv == 'r' || conv == 'a') {
            struct tpl_buf t = {0};
            rc = conv == 's' ? tpl_to_str(r, arg, &t) : tpl_repr(r, arg, &t, 0);
            if (!rc) {
                spec[sn++] = 's';
                spec[sn] = 0;
                if (sn == 2)
                    rc = tpl_buf_put(r, &b, t.p ? t.p : "", t.n);
                else {
                    int w = snprintf(tmp, sizeof tmp, spec, t.p ? t.p : "");
                    rc = w < 0 || (size_t)w >= sizeof tmp ? tpl_buf_put(r, &b, t.p ? t.p : "", t.n)
                                                          : tpl_buf_put(r, &b, tmp, (size_t)w);
                }
            }
            tpl_buf_free(&t);
        } else if (conv && strchr("diuxXoc", conv) && tv_is_number(arg) &&
                   (arg->t != TV_FLOAT || strchr("diu", conv))) { /* %x %o %c want an int */
            long long v = arg->t == TV_FLOAT ? (long long)arg->u.f : (long long)arg->u.i;
            if (conv == 'c') {
                char u[4];
                if (v < 0 || v > 0x10FFFF) {
                    rc = tpl_fail(r, line, "%%c arg not in range(0x110000)");
                    break;
                }
                if (v >= 0xD800 && v < 0xE000) v = 0xFFFD; /* keep strings valid UTF-8 */
                rc = tpl_buf_put(r, &b, u, tpl_utf8_put((uint32_t)v, u));
                continue;
            }
            spec[sn++] = 'l';
            spec[sn++] = 'l';
            spec[sn++] = conv == 'u' || conv == 'i' ? 'd' : conv;
            spec[sn] = 0;
            int w = snprintf(tmp, sizeof tmp, spec, v);
            rc = w < 0 || (size_t)w >= sizeof tmp ? tpl_fail(r, line, "format width too large")
                                                  : tpl_buf_put(r, &b, tmp, (size_t)w);
        } else if (conv && strchr("eEfFgG", conv) && tv_is_number(arg)) {
            double v = arg->t == TV_FLOAT ? arg->u.f : (double)arg->u.i;
            spec[sn++] = conv;
            spec[sn] = 0;
            int w = snprintf(tmp, sizeof tmp, spec, v);
            rc = w < 0 || (size_t)w >= sizeof tmp ? tpl_fail(r, line, "format width too large")
                                                  : tpl_buf_put(r, &b, tmp, (size_t)w);
        } else {
            rc = tpl_fail(r, line, "%%%c format: a number is required, not %s", conv,
                          tpl_type_name(arg));
        }
    }
    if (!rc && !is_map && next < n_items && !(items == args && args->t == TV_LIST))
        rc = tpl_fail(r, line, "not all arguments converted during string formatting");
    if (!rc) rc = new_str(r, b.p ? b.p : "", b.n, out);
    tpl_buf_free(&b);
    return rc;
}
