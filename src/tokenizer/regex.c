/* tokenizer/regex.c: the pre-tokenizer's regular expressions, on PCRE2. tokenizer.json patterns
 * are written for Oniguruma; the constructs real files use (\p{L}, \p{N}, (?i:...), lookahead,
 * possessive classes) mean the same in PCRE2 with PCRE2_UTF | PCRE2_UCP. PCRE2_MATCH_INVALID_UTF
 * lets the subject hold invalid UTF-8: such bytes match nothing. Known difference: \p{...}
 * follows the Unicode version of the installed PCRE2 (14.0 for 10.42), so characters assigned
 * later (CJK extensions H/I, Kaktovik numerals, ...) can pre-tokenize differently from HF. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/tok_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <pcre2.h>
#include <stdlib.h>

struct tok_regex {
    pcre2_code *code;
    int jit; /* 1 when JIT compilation succeeded */
};

int tok_regex_new(const char *pattern, size_t len, int literal, struct tok_regex **out,
                  const char *what) {
    *out = NULL;
    if (len > TOK_MAX_TOKEN) {
        log_error("%s: regex of %zu bytes is too long", what, len);
        return ERR_FORMAT;
    }
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
    opts |= literal ? PCRE2_LITERAL : PCRE2_UCP;
    int err;
    PCRE2_SIZE at;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &err, &at, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        log_error("%s: cannot compile regex at offset %zu: %s", what, (size_t)at, (char *)msg);
        return ERR_FORMAT;
    }
    struct tok_regex *re = calloc(1, sizeof *re);
    if (!re) {
        pcre2_code_free(code);
        return ERR_NOMEM;
    }
    re->code = code;
    re->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    *out = re;
    return OK;
}

void tok_regex_free(struct tok_regex *re) {
    if (!re) return;
    pcre2_code_free(re->code);
    free(re);
}

int tok_regex_each(const struct tok_regex *re, const char *s, size_t n, tok_match_fn *fn,
                   void *ctx) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re->code, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    if (!md || !mc) {
        pcre2_match_data_free(md);
        pcre2_match_context_free(mc);
        return ERR_NOMEM;
    }
    /* Real patterns backtrack at most a few steps per byte; the cap stops runaway patterns. */
    uint64_t limit = 10000000 + 64 * (uint64_t)n;
    pcre2_set_match_limit(mc, limit > UINT32_MAX ? UINT32_MAX : (uint32_t)limit);
    pcre2_set_depth_limit(mc, 100000);
    int rc = OK;
    size_t pos = 0, last = 0;
    uint32_t no_jit = re->jit ? 0 : PCRE2_NO_JIT;
    while (pos <= n) {
        int m = pcre2_match(re->code, (PCRE2_SPTR)s, n, pos, no_jit, md, mc);
        if (m == PCRE2_ERROR_JIT_STACKLIMIT && !no_jit) {
            no_jit = PCRE2_NO_JIT;
            continue;
        }
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof msg);
            log_error("tokenizer: pre-tokenizer regex failed: %s", (char *)msg);
            rc = ERR_UNSUPPORTED;
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t start = ov[0], end = ov[1];
        if (start < last) start = last;
        if (end < start) end = start;
        if (end > n) end = n;
        if ((rc = fn(ctx, start, end))) break;
        last = end;
        if (end > start && end > pos) {
            pos = end;
        } else {
            /* An empty match: look again one character further on. */
            if (end > pos) pos = end;
            if (pos >= n) break;
            int32_t cp;
            pos += (size_t)tok_utf8_next(s + pos, n - pos, &cp);
        }
    }
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    return rc;
}
