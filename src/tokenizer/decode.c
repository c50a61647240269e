/* tokenizer/decode.c: the "decoder" section of tokenizer.json (ByteLevel, Replace, ByteFallback,
 * Fuse, Strip, Metaspace, Sequence) run one token at a time, and tokenizer_decode(). HF runs the
 * decoder over the whole list of tokens; steps that join tokens (Fuse, ByteLevel) only matter to
 * later steps that look at "the first token", which tok_dec_state tracks, so decoding a stream
 * token by token gives the same bytes as decoding it whole. Byte tokens decode to raw bytes
 * (HF would turn invalid UTF-8 into U+FFFD; detok.c does that for streams). */
#include "tokenizer/tok_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

/* ---- parsing ---- */

static int one_char(const char *s, char *dst, int *len) {
    size_t n = s ? strlen(s) : 0;
    int32_t cp;
    if (!n || (size_t)tok_utf8_next(s, n, &cp) != n || cp < 0) return ERR_FORMAT;
    memcpy(dst, s, n);
    *len = (int)n;
    return OK;
}

static int json_small_int(const cJSON *obj, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return OK;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1000 ||
        v->valuedouble != (double)(int)v->valuedouble)
        return ERR_FORMAT;
    *out = (int)v->valuedouble;
    return OK;
}

static int parse_one(const cJSON *j, struct tok_dec *steps, int *n, const char *file, int depth) {
    int bad = 0;
    const char *type = cJSON_IsObject(j) ? tok_json_str(j, "type", &bad) : NULL;
    if (!type || depth > 8) {
        log_error("%s: a decoder is not an object with a string \"type\"", file);
        return ERR_FORMAT;
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "decoders"), *e;
        if (!cJSON_IsArray(list)) {
            log_error("%s: decoder Sequence has no \"decoders\" array", file);
            return ERR_FORMAT;
        }
        cJSON_ArrayForEach(e, list) {
            int rc = parse_one(e, steps, n, file, depth + 1);
            if (rc) return rc;
        }
        return OK;
    }
    if (*n >= TOK_MAX_DEC) {
        log_error("%s: more than %d decoder steps", file, TOK_MAX_DEC);
        return ERR_UNSUPPORTED;
    }
    struct tok_dec s = {0};
    int rc = OK;
    if (!strcmp(type, "ByteLevel")) {
        s.kind = TOK_DEC_BYTELEVEL;
    } else if (!strcmp(type, "ByteFallback")) {
        s.kind = TOK_DEC_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        s.kind = TOK_DEC_FUSE;
    } else if (!strcmp(type, "Replace")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        const char *lit = cJSON_IsObject(pat) ? tok_json_str(pat, "String", &bad) : NULL;
        const char *content = tok_json_str(j, "content", &bad);
        if (!lit || !*lit || !content || bad) {
            log_error("%s: decoder Replace needs a non-empty String \"pattern\" and a string "
                      "\"content\"",
                      file);
            return cJSON_IsObject(pat) && cJSON_GetObjectItemCaseSensitive(pat, "Regex")
                       ? ERR_UNSUPPORTED
                       : ERR_FORMAT;
        }
        s.kind = TOK_DEC_REPLACE;
        s.a_len = strlen(lit);
        s.b_len = strlen(content);
        s.a = malloc(s.a_len + 1);
        s.b = malloc(s.b_len + 1);
        if (!s.a || !s.b) {
            free(s.a);
            free(s.b);
            return ERR_NOMEM;
        }
        memcpy(s.a, lit, s.a_len + 1);
        memcpy(s.b, content, s.b_len + 1);
    } else if (!strcmp(type, "Strip")) {
        s.kind = TOK_DEC_STRIP;
        if (one_char(tok_json_str(j, "content", &bad), s.ch, &s.ch_len) || bad ||
            json_small_int(j, "start", &s.start) || json_small_int(j, "stop", &s.stop)) {
            log_error("%s: decoder Strip needs a one-character \"content\" and small \"start\" "
                      "/ \"stop\" counts",
                      file);
            return ERR_FORMAT;
        }
    } else if (!strcmp(type, "Metaspace")) {
        s.kind = TOK_DEC_METASPACE;
        const char *scheme = tok_json_str(j, "prepend_scheme", &bad);
        if (one_char(tok_json_str(j, "replacement", &bad), s.ch, &s.ch_len) || bad) {
            log_error("%s: decoder Metaspace needs a one-character \"replacement\"", file);
            return ERR_FORMAT;
        }
        if (scheme)
            s.prepend = strcmp(scheme, "never") ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
        else
            s.prepend = tok_json_bool(j, "add_prefix_space", 1, &bad) ? TOK_PREPEND_ALWAYS
                                                                      : TOK_PREPEND_NEVER;
        if (bad) return ERR_FORMAT;
    } else {
        log_error("%s: decoder type \"%s\" is not supported", file, type);
        log_hint("dspark handles ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace and "
                 "Sequence decoders");
        return ERR_UNSUPPORTED;
    }
    for (int i = 0; i < *n; i++) {
        if (steps[i].kind == TOK_DEC_FUSE || steps[i].kind == TOK_DEC_BYTELEVEL) s.joined = 1;
        if (steps[i].kind == TOK_DEC_BYTEFALLBACK) s.bytes_grouped = 1;
    }
    if (s.kind == TOK_DEC_STRIP && s.joined && s.stop) {
        log_error("%s: decoder Strip with \"stop\" after Fuse is not supported", file);
        rc = ERR_UNSUPPORTED;
    }
    steps[(*n)++] = s;
    return rc;
}

int tok_dec_parse(const cJSON *j, struct tok_dec **steps, int *n, const char *file) {
    *steps = NULL;
    *n = 0;
    if (!j || cJSON_IsNull(j)) return OK;
    struct tok_dec *v = calloc(TOK_MAX_DEC, sizeof *v);
    if (!v) return ERR_NOMEM;
    int rc = parse_one(j, v, n, file, 0);
    if (rc) {
        tok_dec_free(v, *n);
        *n = 0;
        return rc;
    }
    *steps = v;
    return OK;
}

void tok_dec_free(struct tok_dec *steps, int n) {
    for (int i = 0; i < n; i++) {
        free(steps[i].a);
        free(steps[i].b);
    }
    free(steps);
}

/* ---- one token ---- */

void tok_dec_begin(const struct tokenizer *t, struct tok_dec_state *st) {
    memset(st, 0, sizeof *st);
    for (int i = 0; i < t->n_dec; i++) st->strip_left[i] = t->dec[i].start;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The byte of a "<0xNN>" token, or -1. */
static int byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* Runs one step over cur (bytes in *cur), writing into *next; returns OK or ERR_NOMEM. */
static int run_step(const struct tok_dec *d, int k, struct tok_dec_state *st, size_t index,
                    const struct tok_buf *cur, struct tok_buf *next) {
    const char *s = cur->p;
    size_t n = cur->n, i = 0;
    next->n = 0;
    switch (d->kind) {
    case TOK_DEC_BYTELEVEL: {
        if (tok_buf_reserve(next, n)) return ERR_NOMEM;
        while (i < n) {
            int32_t cp;
            int m = tok_utf8_next(s + i, n - i, &cp);
            int b = tok_char_to_byte(cp);
            if (b < 0) return tok_buf_add(next, s, n); /* not all mapped: keep the text */
            next->p[next->n++] = (char)b;
            i += (size_t)m;
        }
        next->p[next->n] = 0;
        return OK;
    }
    case TOK_DEC_REPLACE:
        while (i < n) {
            if (i + d->a_len <= n && !memcmp(s + i, d->a, d->a_len)) {
                if (tok_buf_add(next, d->b, d->b_len)) return ERR_NOMEM;
                i += d->a_len;
            } else if (tok_buf_add(next, s + i++, 1)) {
                return ERR_NOMEM;
            }
        }
        return tok_buf_add(next, "", 0);
    case TOK_DEC_BYTEFALLBACK: {
        int b = byte_token(s, n);
        if (b < 0) return tok_buf_add(next, s, n);
        char c = (char)b;
        return tok_buf_add(next, &c, 1);
    }
    case TOK_DEC_FUSE:
        return tok_buf_add(next, s, n);
    case TOK_DEC_STRIP: {
        size_t a = 0, b = n, cl = (size_t)d->ch_len;
        int left = d->joined ? st->strip_left[k] : d->start;
        while (left > 0 && b - a >= cl && !memcmp(s + a, d->ch, cl)) a += cl, left--;
        if (d->joined) st->strip_left[k] = a < b ? 0 : left;
        for (int r = d->stop; r > 0 && b - a >= cl && !memcmp(s + b - cl, d->ch, cl); r--) b -= cl;
        return tok_buf_add(next, s + a, b - a);
    }
    case TOK_DEC_METASPACE: {
        int drop = (d->joined || index == 0) && d->prepend != TOK_PREPEND_NEVER;
        size_t cl = (size_t)d->ch_len;
        while (i < n) {
            if (i + cl <= n && !memcmp(s + i, d->ch, cl)) {
                if (!drop && tok_buf_add(next, " ", 1)) return ERR_NOMEM;
                i += cl;
            } else if (tok_buf_add(next, s + i++, 1)) {
                return ERR_NOMEM;
            }
        }
        return tok_buf_add(next, "", 0);
    }
    }
    return ERR_UNSUPPORTED;
}

int tok_dec_token(const struct tokenizer *t, struct tok_dec_state *st, int32_t id,
                  struct tok_buf *out, struct tok_buf *scratch) {
    if (t->tok_len[id] == TOK_NO_TOKEN) return OK; /* a hole in the ids: HF skips it */
    const char *text = t->blob + t->tok_off[id];
    size_t len = t->tok_len[id];
    int is_byte = byte_token(text, len) >= 0;
    size_t group = (is_byte && st->prev_byte) ? st->n_groups - 1 : st->n_groups;
    int rc = OK;
    if (!t->has_decoder) {
        if (st->n_tokens) rc = tok_buf_add(out, " ", 1);
        if (!rc) rc = tok_buf_add(out, text, len);
    } else {
        struct tok_buf *cur = &scratch[0], *next = &scratch[1];
        cur->n = 0;
        rc = tok_buf_add(cur, text, len);
        for (int k = 0; k < t->n_dec && !rc; k++) {
            const struct tok_dec *d = &t->dec[k];
            rc = run_step(d, k, st, d->bytes_grouped ? group : st->n_tokens, cur, next);
            if (!rc && next->n > 64 * (size_t)TOK_MAX_TOKEN) {
                log_error("tokenizer: the decoder makes token %d longer than %d bytes", id,
                          64 * TOK_MAX_TOKEN);
                rc = ERR_UNSUPPORTED;
            }
            struct tok_buf *x = cur;
            cur = next;
            next = x;
        }
        if (!rc) rc = tok_buf_add(out, cur->p, cur->n);
    }
    st->n_tokens++;
    if (!(is_byte && st->prev_byte)) st->n_groups++;
    st->prev_byte = is_byte;
    return rc;
}

/* ---- whole sequences ---- */

int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, int n, char **out,
                     size_t *len) {
    *out = NULL;
    if (len) *len = 0;
    struct tok_buf buf = {0}, scratch[2] = {{0}};
    struct tok_dec_state st;
    tok_dec_begin(t, &st);
    int rc = tok_buf_add(&buf, "", 0);
    for (int i = 0; i < n && !rc; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            log_error("tokenizer: id %d is outside the vocabulary [0, %d)", ids[i], t->n_vocab);
            rc = ERR_ARG;
            break;
        }
        rc = tok_dec_token(t, &st, ids[i], &buf, scratch);
    }
    tok_buf_free(&scratch[0]);
    tok_buf_free(&scratch[1]);
    if (rc) {
        tok_buf_free(&buf);
        return rc;
    }
    *out = buf.p;
    if (len) *len = buf.n;
    return OK;
}
