/* chat/tpl_json.c: JSON in and out. tpl_to_json() is Python's json.dumps() as transformers'
 * tojson filter calls it (ensure_ascii=False, sort_keys=False, indent, separators), so
 * non-ASCII text stays as is and only ", \\ and control characters are escaped. The reader
 * keeps what Python's json.loads keeps: integers are ints, numbers with a fraction or an
 * exponent are floats (1.0 prints as 1.0), and object keys keep their order. */
#include "chat/tpl_impl.h"

#include "base/json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- writer ---- */

static int put(struct tpl_render *r, struct tpl_buf *b, const char *s) {
    return tpl_buf_put(r, b, s, strlen(s));
}

static int json_str(struct tpl_render *r, const char *s, size_t len, int ascii, struct tpl_buf *b) {
    if (put(r, b, "\"")) return -1;
    size_t run = 0;
    for (size_t i = 0; i < len;) {
        size_t a = i;
        uint32_t cp = tpl_utf8_next(s, &i);
        char esc[16];
        esc[0] = 0;
        switch (cp) {
        case '"':
            strcpy(esc, "\\\"");
            break;
        case '\\':
            strcpy(esc, "\\\\");
            break;
        case '\n':
            strcpy(esc, "\\n");
            break;
        case '\r':
            strcpy(esc, "\\r");
            break;
        case '\t':
            strcpy(esc, "\\t");
            break;
        case '\b':
            strcpy(esc, "\\b");
            break;
        case '\f':
            strcpy(esc, "\\f");
            break;
        default:
            if (cp < 0x20 || (ascii && cp > 0x7E)) {
                if (cp > 0xFFFF) {
                    uint32_t v = cp - 0x10000;
                    snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                             0xDC00 + (v & 0x3FF));
                } else {
                    snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
                }
            }
        }
        if (!esc[0]) {
            run += i - a;
            continue;
        }
        if (tpl_buf_put(r, b, s + a - run, run) || put(r, b, esc)) return -1;
        run = 0;
    }
    if (tpl_buf_put(r, b, s + len - run, run)) return -1;
    return put(r, b, "\"");
}

static int newline_indent(struct tpl_render *r, const struct tpl_json_opts *o, int level,
                          struct tpl_buf *b) {
    if (put(r, b, "\n")) return -1;
    for (int i = 0; i < level; i++) {
        if (o->indent_str) {
            if (put(r, b, o->indent_str)) return -1;
        } else {
            for (int k = 0; k < o->indent; k++)
                if (put(r, b, " ")) return -1;
        }
    }
    return 0;
}

static int key_text(struct tpl_render *r, int line, const struct tv *k,
                    const struct tpl_json_opts *o, struct tpl_buf *b) {
    char tmp[64];
    switch (k->t) {
    case TV_STR:
        return json_str(r, k->u.s->s, k->u.s->len, o->ensure_ascii, b);
    case TV_BOOL:
        return put(r, b, k->u.i ? "\"true\"" : "\"false\"");
    case TV_NONE:
        return put(r, b, "\"null\"");
    case TV_INT:
        snprintf(tmp, sizeof tmp, "\"%lld\"", (long long)k->u.i);
        return put(r, b, tmp);
    case TV_FLOAT:
        tpl_fmt_float(k->u.f, tmp + 1, sizeof tmp - 2);
        tmp[0] = '"';
        if (isnan(k->u.f))
            strcpy(tmp, "\"NaN");
        else if (isinf(k->u.f))
            strcpy(tmp, k->u.f < 0 ? "\"-Infinity" : "\"Infinity");
        strcat(tmp, "\"");
        return put(r, b, tmp);
    default:
        return tpl_fail(r, line, "keys must be str, int, float, bool or None, not %s",
                        tpl_type_name(k));
    }
}

static int dump(struct tpl_render *r, int line, const struct tv *v, const struct tpl_json_opts *o,
                int level, struct tpl_buf *b);

static int dump_dict(struct tpl_render *r, int line, const struct tv_dict *d,
                     const struct tpl_json_opts *o, int level, struct tpl_buf *b) {
    if (!d->n) return put(r, b, "{}");
    size_t *order = tv_alloc(d->n * sizeof *order);
    if (!order) return tpl_oom(r, line);
    for (size_t i = 0; i < d->n; i++) order[i] = i;
    if (o->sort_keys) { /* insertion sort: stable, keys compared as Python would */
        for (size_t i = 1; i < d->n; i++)
            for (size_t j = i; j > 0; j--) {
                int lt;
                if (tv_less(&d->k[order[j]], &d->k[order[j - 1]], &lt)) {
                    tv_free(order, d->n * sizeof *order);
                    return tpl_fail(r, line, "'<' not supported between the keys of a dict");
                }
                if (!lt) break;
                size_t t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
    }
    const char *item_sep = o->item_sep ? o->item_sep : o->indent >= 0 ? "," : ", ";
    const char *key_sep = o->key_sep ? o->key_sep : ": ";
    int rc = put(r, b, "{");
    for (size_t i = 0; i < d->n && !rc; i++) {
        if (i) rc = put(r, b, item_sep);
        if (!rc && o->indent >= 0) rc = newline_indent(r, o, level + 1, b);
        if (!rc) rc = key_text(r, line, &d->k[order[i]], o, b);
        if (!rc) rc = put(r, b, key_sep);
        if (!rc) rc = dump(r, line, &d->v[order[i]], o, level + 1, b);
    }
    if (!rc && o->indent >= 0) rc = newline_indent(r, o, level, b);
    if (!rc) rc = put(r, b, "}");
    tv_free(order, d->n * sizeof *order);
    return rc;
}

static int dump(struct tpl_render *r, int line, const struct tv *v, const struct tpl_json_opts *o,
                int level, struct tpl_buf *b) {
    char tmp[64];
    if (level > TV_MAX_DEPTH) return tpl_fail(r, line, "values nested too deeply for tojson");
    if (tpl_step(r, line, 1)) return -1;
    switch (v->t) {
    case TV_NONE:
        return put(r, b, "null");
    case TV_BOOL:
        return put(r, b, v->u.i ? "true" : "false");
    case TV_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v->u.i);
        return put(r, b, tmp);
    case TV_FLOAT:
        if (!isfinite(v->u.f) && !o->allow_nan)
            return tpl_fail(r, line, "Out of range float values are not JSON compliant");
        if (isnan(v->u.f)) return put(r, b, "NaN");
        if (isinf(v->u.f)) return put(r, b, v->u.f < 0 ? "-Infinity" : "Infinity");
        tpl_fmt_float(v->u.f, tmp, sizeof tmp);
        return put(r, b, tmp);
    case TV_STR:
        return json_str(r, v->u.s->s, v->u.s->len, o->ensure_ascii, b);
    case TV_LIST:
        if (v->u.l->kind == TL_LIST || v->u.l->kind == TL_TUPLE) {
            const struct tv_list *l = v->u.l;
            if (!l->n) return put(r, b, "[]");
            const char *item_sep = o->item_sep ? o->item_sep : o->indent >= 0 ? "," : ", ";
            if (put(r, b, "[")) return -1;
            for (size_t i = 0; i < l->n; i++) {
                if (i && put(r, b, item_sep)) return -1;
                if (o->indent >= 0 && newline_indent(r, o, level + 1, b)) return -1;
                if (dump(r, line, &l->v[i], o, level + 1, b)) return -1;
            }
            if (o->indent >= 0 && newline_indent(r, o, level, b)) return -1;
            return put(r, b, "]");
        }
        break;
    case TV_DICT:
        if (v->u.d->kind == TD_DICT) return dump_dict(r, line, v->u.d, o, level, b);
        break;
    default:
        break;
    }
    return tpl_fail(r, line, "Object of type %s is not JSON serializable", tpl_type_name(v));
}

int tpl_to_json(struct tpl_render *r, int line, const struct tv *v, const struct tpl_json_opts *o,
                struct tpl_buf *b) {
    return dump(r, line, v, o, 0, b);
}

/* ---- reader ---- */

struct jreader {
    const char *s;
    size_t n, i;
    int depth;
    const char *why;
};

static void jspace(struct jreader *J) {
    while (J->i < J->n &&
           (J->s[J->i] == ' ' || J->s[J->i] == '\t' || J->s[J->i] == '\n' || J->s[J->i] == '\r'))
        J->i++;
}

static int hex4(const char *s, size_t end, size_t p, uint32_t *out) {
    if (p + 4 > end) return -1;
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[p + k];
        int h = c >= '0' && c <= '9'                 ? c - '0'
                : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10
                                                     : -1;
        if (h < 0) return -1;
        v = v * 16 + (uint32_t)h;
    }
    *out = v;
    return 0;
}

static int jstring(struct jreader *J, struct tv *out) {
    size_t start = ++J->i;
    while (J->i < J->n && J->s[J->i] != '"') {
        if ((unsigned char)J->s[J->i] < 0x20) return J->why = "control character in a string", -1;
        J->i += J->s[J->i] == '\\' ? 2 : 1;
    }
    if (J->i >= J->n) return J->why = "unterminated string", -1;
    size_t end = J->i, n = 0;
    char *buf = malloc(end - start + 1);
    if (!buf) return J->why = "out of memory", -1;
    for (size_t p = start; p < end;) {
        if (J->s[p] != '\\') {
            buf[n++] = J->s[p++];
            continue;
        }
        char e = J->s[p + 1];
        const char *m = e ? strchr("\"\\/bfnrt", e) : NULL;
        if (m) {
            buf[n++] = "\"\\/\b\f\n\r\t"[m - "\"\\/bfnrt"];
            p += 2;
            continue;
        }
        uint32_t cp, lo;
        if (e != 'u' || hex4(J->s, end, p + 2, &cp)) {
            free(buf);
            return J->why = "bad escape in a string", -1;
        }
        p += 6;
        if (cp >= 0xD800 && cp < 0xDC00 && p + 6 <= end && J->s[p] == '\\' && J->s[p + 1] == 'u' &&
            !hex4(J->s, end, p + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            p += 6;
        }
        if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD; /* a lone surrogate */
        n += tpl_utf8_put(cp, buf + n);
    }
    J->i = end + 1;
    int rc = tv_str_new(buf, n, out);
    free(buf);
    return rc ? (J->why = "out of memory", -1) : 0;
}

static int jvalue(struct jreader *J, struct tv *out);

static int jnumber(struct jreader *J, struct tv *out) {
    size_t a = J->i;
    int is_float = 0;
    if (J->s[J->i] == '-') J->i++;
    if (J->i >= J->n || J->s[J->i] < '0' || J->s[J->i] > '9') return J->why = "bad number", -1;
    if (J->s[J->i] == '0')
        J->i++;
    else
        while (J->i < J->n && J->s[J->i] >= '0' && J->s[J->i] <= '9') J->i++;
    if (J->i < J->n && J->s[J->i] == '.') {
        is_float = 1;
        if (++J->i >= J->n || J->s[J->i] < '0' || J->s[J->i] > '9')
            return J->why = "bad number", -1;
        while (J->i < J->n && J->s[J->i] >= '0' && J->s[J->i] <= '9') J->i++;
    }
    if (J->i < J->n && (J->s[J->i] | 32) == 'e') {
        is_float = 1;
        J->i++;
        if (J->i < J->n && (J->s[J->i] == '+' || J->s[J->i] == '-')) J->i++;
        if (J->i >= J->n || J->s[J->i] < '0' || J->s[J->i] > '9') return J->why = "bad number", -1;
        while (J->i < J->n && J->s[J->i] >= '0' && J->s[J->i] <= '9') J->i++;
    }
    char buf[400];
    size_t len = J->i - a;
    if (len >= sizeof buf) return J->why = "number too long", -1;
    memcpy(buf, J->s + a, len);
    buf[len] = 0;
    if (!is_float) {
        char *end;
        errno = 0;
        long long v = strtoll(buf, &end, 10);
        if (!errno) {
            *out = tv_int(v);
            return 0;
        }
    }
    *out = tv_float(strtod(buf, NULL));
    return 0;
}

static int jcontainer(struct jreader *J, struct tv *out) {
    char close = J->s[J->i] == '[' ? ']' : '}';
    if (++J->depth > TV_MAX_DEPTH) return J->why = "nested too deeply", -1;
    J->i++;
    if (close == ']' ? tv_list_new(TL_LIST, 0, out) : tv_dict_new(TD_DICT, 0, out))
        return J->why = "out of memory", -1;
    jspace(J);
    if (J->i < J->n && J->s[J->i] == close) {
        J->i++;
        J->depth--;
        return 0;
    }
    while (1) {
        struct tv k = {0}, v;
        jspace(J);
        if (close == '}') {
            if (J->i >= J->n || J->s[J->i] != '"' || jstring(J, &k)) goto fail;
            jspace(J);
            if (J->i >= J->n || J->s[J->i++] != ':') {
                tv_drop(&k);
                goto fail;
            }
        }
        if (jvalue(J, &v)) {
            tv_drop(&k);
            goto fail;
        }
        if (close == ']' ? tv_list_push(out, v) : tv_dict_set(out, k, v, NULL)) goto fail;
        jspace(J);
        if (J->i < J->n && J->s[J->i] == ',') {
            J->i++;
            continue;
        }
        if (J->i < J->n && J->s[J->i] == close) break;
        goto fail;
    }
    J->i++;
    J->depth--;
    return 0;
fail:
    if (!J->why) J->why = "malformed JSON";
    tv_drop(out);
    return -1;
}

static int jvalue(struct jreader *J, struct tv *out) {
    jspace(J);
    if (J->i >= J->n) return J->why = "unexpected end of JSON", -1;
    char c = J->s[J->i];
    if (c == '{' || c == '[') return jcontainer(J, out);
    if (c == '"') return jstring(J, out);
    if (c == '-' || (c >= '0' && c <= '9')) return jnumber(J, out);
    static const char *const words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t m = strlen(words[k]);
        if (J->n - J->i >= m && !memcmp(J->s + J->i, words[k], m)) {
            J->i += m;
            *out = k == 2 ? tv_none() : tv_bool(k == 0);
            return 0;
        }
    }
    return J->why = "unexpected character in JSON", -1;
}

int tpl_from_json(const char *s, size_t len, struct tv *out, const char **why) {
    struct jreader J = {.s = s, .n = len};
    if (!utf8_valid(s, len)) {
        if (why) *why = "invalid UTF-8";
        return -1;
    }
    if (jvalue(&J, out)) {
        if (why) *why = J.why;
        return -1;
    }
    jspace(&J);
    if (J.i != J.n) {
        tv_drop(out);
        if (why) *why = "extra data after the JSON value";
        return -1;
    }
    return 0;
}

/* cJSON keeps numbers as doubles: integral ones within int64 become ints. */
int tpl_from_cjson(const cJSON *j, struct tv *out, int depth) {
    if (depth > TV_MAX_DEPTH) return -1;
    if (cJSON_IsNull(j))
        *out = tv_none();
    else if (cJSON_IsBool(j))
        *out = tv_bool(cJSON_IsTrue(j));
    else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        *out = d == floor(d) && fabs(d) < 9.2e18 ? tv_int((int64_t)d) : tv_float(d);
    } else if (cJSON_IsString(j)) {
        const char *s = j->valuestring ? j->valuestring : "";
        size_t n = strlen(s);
        if (!utf8_valid(s, n) || tv_str_new(s, n, out)) return -1;
    } else if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
        int arr = cJSON_IsArray(j);
        if (arr ? tv_list_new(TL_LIST, 0, out) : tv_dict_new(TD_DICT, 0, out)) return -1;
        for (const cJSON *c = j->child; c; c = c->next) {
            struct tv v, k;
            if (tpl_from_cjson(c, &v, depth + 1)) return tv_drop(out), -1;
            if (arr) {
                if (tv_list_push(out, v)) return tv_drop(out), -1;
            } else {
                const char *key = c->string ? c->string : "";
                if (!utf8_valid(key, strlen(key)) || tv_str_new(key, strlen(key), &k)) {
                    tv_drop(&v);
                    return tv_drop(out), -1;
                }
                if (tv_dict_set(out, k, v, NULL)) return tv_drop(out), -1;
            }
        }
    } else {
        return -1;
    }
    return 0;
}
