/* tokenizer/normalize.c: the "normalizer" section of tokenizer.json: Unicode normal forms
 * (utf8proc), Prepend, Replace, Strip, Lowercase and Sequences of them. Invalid UTF-8 bytes pass
 * through unchanged; normal forms apply to the valid runs between them. */
#include "tokenizer/tok_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- parsing ---- */

static int add_step(struct tok_norm **steps, int *n, struct tok_norm s) {
    if (*n >= TOK_MAX_STEPS) return ERR_UNSUPPORTED;
    struct tok_norm *v = realloc(*steps, (size_t)(*n + 1) * sizeof *v);
    if (!v) return ERR_NOMEM;
    *steps = v;
    v[(*n)++] = s;
    return OK;
}

static int dup_str(const char *s, char **out, size_t *len) {
    *len = strlen(s);
    *out = malloc(*len + 1);
    if (!*out) return ERR_NOMEM;
    memcpy(*out, s, *len + 1);
    return OK;
}

static int parse_one(const cJSON *j, struct tok_norm **steps, int *n, const char *file, int depth) {
    if (!j || cJSON_IsNull(j)) return OK;
    if (depth > 8) {
        log_error("%s: normalizers nested too deeply", file);
        return ERR_FORMAT;
    }
    int bad = 0;
    const char *type = cJSON_IsObject(j) ? tok_json_str(j, "type", &bad) : NULL;
    if (!type) {
        log_error("%s: a normalizer is not an object with a string \"type\"", file);
        return ERR_FORMAT;
    }
    struct tok_norm s = {0};
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "normalizers");
        if (!cJSON_IsArray(list)) {
            log_error("%s: normalizer Sequence has no \"normalizers\" array", file);
            return ERR_FORMAT;
        }
        const cJSON *e;
        cJSON_ArrayForEach(e, list) {
            int rc = parse_one(e, steps, n, file, depth + 1);
            if (rc) return rc;
        }
        return OK;
    } else if (!strcmp(type, "NFC")) {
        s.kind = TOK_NORM_NFC;
    } else if (!strcmp(type, "NFD")) {
        s.kind = TOK_NORM_NFD;
    } else if (!strcmp(type, "NFKC")) {
        s.kind = TOK_NORM_NFKC;
    } else if (!strcmp(type, "NFKD")) {
        s.kind = TOK_NORM_NFKD;
    } else if (!strcmp(type, "Lowercase")) {
        s.kind = TOK_NORM_LOWERCASE;
    } else if (!strcmp(type, "Prepend")) {
        const char *p = tok_json_str(j, "prepend", &bad);
        if (!p) {
            log_error("%s: normalizer Prepend has no string \"prepend\"", file);
            return ERR_FORMAT;
        }
        s.kind = TOK_NORM_PREPEND;
        if (dup_str(p, &s.a, &s.a_len)) return ERR_NOMEM;
    } else if (!strcmp(type, "Replace")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        const char *content = tok_json_str(j, "content", &bad);
        const char *lit = cJSON_IsObject(pat) ? tok_json_str(pat, "String", &bad) : NULL;
        const char *rx = cJSON_IsObject(pat) ? tok_json_str(pat, "Regex", &bad) : NULL;
        if (!content || (!lit && !rx) || bad) {
            log_error("%s: normalizer Replace needs a String or Regex \"pattern\" and a string "
                      "\"content\"",
                      file);
            return ERR_FORMAT;
        }
        s.kind = TOK_NORM_REPLACE;
        if (lit && !*lit) {
            log_error("%s: normalizer Replace has an empty pattern", file);
            return ERR_FORMAT;
        }
        if (rx) {
            int rc = tok_regex_new(rx, strlen(rx), 0, &s.re, file);
            if (rc) return rc;
        } else if (dup_str(lit, &s.a, &s.a_len)) {
            return ERR_NOMEM;
        }
        if (dup_str(content, &s.b, &s.b_len)) {
            tok_regex_free(s.re);
            free(s.a);
            return ERR_NOMEM;
        }
    } else if (!strcmp(type, "Strip")) {
        s.kind = TOK_NORM_STRIP;
        s.left = tok_json_bool(j, "strip_left", 0, &bad);
        s.right = tok_json_bool(j, "strip_right", 0, &bad);
    } else {
        log_error("%s: normalizer type \"%s\" is not supported", file, type);
        log_hint("dspark handles NFC/NFD/NFKC/NFKD, Lowercase, Prepend, Replace, Strip and "
                 "Sequence normalizers");
        return ERR_UNSUPPORTED;
    }
    if (bad) {
        log_error("%s: normalizer %s has a field of the wrong type", file, type);
        free(s.a);
        free(s.b);
        tok_regex_free(s.re);
        return ERR_FORMAT;
    }
    int rc = add_step(steps, n, s);
    if (rc == ERR_UNSUPPORTED) log_error("%s: more than %d normalizers", file, TOK_MAX_STEPS);
    if (rc) {
        free(s.a);
        free(s.b);
        tok_regex_free(s.re);
    }
    return rc;
}

int tok_norm_parse(const cJSON *j, struct tok_norm **steps, int *n, const char *file) {
    *steps = NULL;
    *n = 0;
    int rc = parse_one(j, steps, n, file, 0);
    if (rc) {
        tok_norm_free(*steps, *n);
        *steps = NULL;
        *n = 0;
    }
    return rc;
}

void tok_norm_free(struct tok_norm *steps, int n) {
    for (int i = 0; i < n; i++) {
        free(steps[i].a);
        free(steps[i].b);
        tok_regex_free(steps[i].re);
    }
    free(steps);
}

/* ---- applying ---- */

static int unicode_form(const char *s, size_t n, int options, struct tok_buf *out) {
    size_t i = 0;
    while (i < n) {
        /* Find the next valid run [i, j) and whether it is all ASCII. */
        size_t j = i;
        int ascii = 1;
        while (j < n) {
            int32_t cp;
            int k = tok_utf8_next(s + j, n - j, &cp);
            if (cp < 0) break;
            if (cp >= 0x80) ascii = 0;
            j += (size_t)k;
        }
        if (j > i) {
            if (ascii) {
                if (tok_buf_add(out, s + i, j - i)) return ERR_NOMEM;
            } else {
                utf8proc_uint8_t *dst = NULL;
                utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s + i,
                                                  (utf8proc_ssize_t)(j - i), &dst, options);
                if (m < 0) {
                    free(dst);
                    return m == UTF8PROC_ERROR_NOMEM ? ERR_NOMEM : ERR_FORMAT;
                }
                int rc = tok_buf_add(out, dst, (size_t)m);
                free(dst);
                if (rc) return rc;
            }
        }
        if (j < n) {
            if (tok_buf_add(out, s + j, 1)) return ERR_NOMEM; /* an invalid byte */
            j++;
        }
        i = j;
    }
    return OK;
}

static int lowercase(const char *s, size_t n, struct tok_buf *out) {
    size_t i = 0;
    while (i < n) {
        int32_t cp;
        int k = tok_utf8_next(s + i, n - i, &cp);
        if (cp < 0) {
            if (tok_buf_add(out, s + i, 1)) return ERR_NOMEM;
        } else if (cp == 0x130) { /* İ lowercases to i + combining dot above */
            if (tok_buf_add(out, "i\xcc\x87", 3)) return ERR_NOMEM;
        } else {
            char tmp[4];
            int m = tok_utf8_put(tmp, utf8proc_tolower(cp));
            if (tok_buf_add(out, tmp, (size_t)m)) return ERR_NOMEM;
        }
        i += (size_t)k;
    }
    return OK;
}

struct replace_ctx {
    const char *s;
    size_t last;
    const struct tok_norm *step;
    struct tok_buf *out;
};

static int replace_match(void *ctx, size_t start, size_t end) {
    struct replace_ctx *c = ctx;
    if (tok_buf_add(c->out, c->s + c->last, start - c->last)) return ERR_NOMEM;
    if (tok_buf_add(c->out, c->step->b, c->step->b_len)) return ERR_NOMEM;
    c->last = end;
    return OK;
}

static int replace(const struct tok_norm *st, const char *s, size_t n, struct tok_buf *out) {
    if (st->re) {
        struct replace_ctx c = {s, 0, st, out};
        int rc = tok_regex_each(st->re, s, n, replace_match, &c);
        if (rc) return rc;
        return tok_buf_add(out, s + c.last, n - c.last);
    }
    size_t i = 0, last = 0;
    while (i + st->a_len <= n) {
        if (memcmp(s + i, st->a, st->a_len) == 0) {
            if (tok_buf_add(out, s + last, i - last) || tok_buf_add(out, st->b, st->b_len))
                return ERR_NOMEM;
            i += st->a_len;
            last = i;
        } else {
            i++;
        }
    }
    return tok_buf_add(out, s + last, n - last);
}

static int strip(const struct tok_norm *st, const char *s, size_t n, struct tok_buf *out) {
    size_t a = 0, b = n;
    if (st->left) {
        while (a < b) {
            int32_t cp;
            int k = tok_utf8_next(s + a, b - a, &cp);
            if (!tok_is_space(cp)) break;
            a += (size_t)k;
        }
    }
    if (st->right) {
        while (b > a) {
            size_t p = b - 1;
            while (p > a && ((unsigned char)s[p] & 0xc0) == 0x80 && b - p < 4) p--;
            int32_t cp;
            int k = tok_utf8_next(s + p, b - p, &cp);
            if ((size_t)k != b - p || !tok_is_space(cp)) break;
            b = p;
        }
    }
    return tok_buf_add(out, s + a, b - a);
}

static int apply(const struct tok_norm *st, const char *s, size_t n, struct tok_buf *out) {
    switch (st->kind) {
    case TOK_NORM_NFC:
        return unicode_form(s, n, UTF8PROC_STABLE | UTF8PROC_COMPOSE, out);
    case TOK_NORM_NFD:
        return unicode_form(s, n, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, out);
    case TOK_NORM_NFKC:
        return unicode_form(s, n, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, out);
    case TOK_NORM_NFKD:
        return unicode_form(s, n, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, out);
    case TOK_NORM_LOWERCASE:
        return lowercase(s, n, out);
    case TOK_NORM_PREPEND:
        if (n && tok_buf_add(out, st->a, st->a_len)) return ERR_NOMEM;
        return tok_buf_add(out, s, n);
    case TOK_NORM_REPLACE:
        return replace(st, s, n, out);
    case TOK_NORM_STRIP:
        return strip(st, s, n, out);
    }
    return ERR_UNSUPPORTED;
}

int tok_normalize(const struct tok_norm *steps, int n_steps, const char *s, size_t n,
                  struct tok_buf *out) {
    out->n = 0;
    if (!n_steps) return tok_buf_add(out, s, n);
    struct tok_buf tmp = {0};
    int rc = OK;
    const char *src = s;
    size_t src_n = n;
    for (int i = 0; i < n_steps && !rc; i++) {
        /* Alternate between out and tmp so that the last step writes into out. */
        struct tok_buf *dst = ((n_steps - 1 - i) % 2 == 0) ? out : &tmp;
        dst->n = 0;
        if ((rc = tok_buf_reserve(dst, src_n))) break;
        rc = apply(&steps[i], src, src_n, dst);
        src = dst->p;
        src_n = dst->n;
        if (!rc && src_n / TOK_MAX_GROWTH > n + 4096) {
            log_error("tokenizer: the normalizer makes the text over %d times longer",
                      TOK_MAX_GROWTH);
            rc = ERR_UNSUPPORTED;
        }
    }
    tok_buf_free(&tmp);
    return rc;
}
