/* tokenizer/pretok.c: the "pre_tokenizer" section of tokenizer.json: Split (regex or string,
 * with its five delimiter behaviors and invert), ByteLevel (GPT-2 regex and byte-to-character
 * map), Metaspace, Digits, Whitespace, WhitespaceSplit and Sequences of them. */
#include "tokenizer/tok_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- the GPT-2 byte map ---- */

static int32_t byte_to_cp(unsigned b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return (int32_t)b;
    if (b <= 32) return 256 + (int32_t)b;
    if (b >= 127 && b <= 160) return 256 + 33 + (int32_t)(b - 127);
    return 256 + 67; /* 173 */
}

int tok_char_to_byte(int32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return cp;
    if (cp >= 256 && cp <= 288) return cp - 256;
    if (cp >= 289 && cp <= 322) return cp - 289 + 127;
    if (cp == 323) return 173;
    return -1;
}

int tok_bytes_to_chars(const char *s, size_t n, struct tok_buf *out) {
    if (tok_buf_reserve(out, 2 * n)) return ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        out->n += (size_t)tok_utf8_put(out->p + out->n, byte_to_cp((unsigned char)s[i]));
    out->p[out->n] = 0;
    return OK;
}

/* ---- parsing ---- */

static int parse_behavior(const char *s, enum tok_split_behavior *b) {
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (s && !strcmp(s, names[i])) {
            *b = (enum tok_split_behavior)i;
            return OK;
        }
    return ERR_FORMAT;
}

static int one_char(const char *s, char *dst, int *len) {
    size_t n = strlen(s);
    int32_t cp;
    if (!n || (size_t)tok_utf8_next(s, n, &cp) != n || cp < 0) return ERR_FORMAT;
    memcpy(dst, s, n);
    *len = (int)n;
    return OK;
}

static int parse_prepend(const cJSON *j, enum tok_prepend *p, int *bad) {
    const char *scheme = tok_json_str(j, "prepend_scheme", bad);
    if (scheme) {
        if (!strcmp(scheme, "always"))
            *p = TOK_PREPEND_ALWAYS;
        else if (!strcmp(scheme, "first"))
            *p = TOK_PREPEND_FIRST;
        else if (!strcmp(scheme, "never"))
            *p = TOK_PREPEND_NEVER;
        else
            return ERR_FORMAT;
        return OK;
    }
    *p = tok_json_bool(j, "add_prefix_space", 1, bad) ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
    return OK;
}

static int parse_one(const cJSON *j, struct tok_pretok **steps, int *n, const char *file,
                     int depth) {
    if (!j || cJSON_IsNull(j)) return OK;
    if (depth > 8) {
        log_error("%s: pre-tokenizers nested too deeply", file);
        return ERR_FORMAT;
    }
    int bad = 0, rc = OK;
    const char *type = cJSON_IsObject(j) ? tok_json_str(j, "type", &bad) : NULL;
    if (!type) {
        log_error("%s: a pre-tokenizer is not an object with a string \"type\"", file);
        return ERR_FORMAT;
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
        if (!cJSON_IsArray(list)) {
            log_error("%s: pre-tokenizer Sequence has no \"pretokenizers\" array", file);
            return ERR_FORMAT;
        }
        const cJSON *e;
        cJSON_ArrayForEach(e, list) {
            if ((rc = parse_one(e, steps, n, file, depth + 1))) return rc;
        }
        return OK;
    }
    struct tok_pretok s = {0};
    if (!strcmp(type, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        const char *lit = cJSON_IsObject(pat) ? tok_json_str(pat, "String", &bad) : NULL;
        const char *rx = cJSON_IsObject(pat) ? tok_json_str(pat, "Regex", &bad) : NULL;
        s.kind = TOK_PRE_SPLIT;
        s.invert = tok_json_bool(j, "invert", 0, &bad);
        if ((!lit && !rx) || bad ||
            parse_behavior(tok_json_str(j, "behavior", &bad), &s.behavior)) {
            log_error("%s: pre-tokenizer Split needs a String or Regex \"pattern\" and a "
                      "\"behavior\" (Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                      "Contiguous)",
                      file);
            return ERR_FORMAT;
        }
        const char *p = rx ? rx : lit;
        if ((rc = tok_regex_new(p, strlen(p), !rx, &s.re, file))) return rc;
    } else if (!strcmp(type, "ByteLevel")) {
        s.kind = TOK_PRE_BYTELEVEL;
        s.add_prefix_space = tok_json_bool(j, "add_prefix_space", 1, &bad);
        if (tok_json_bool(j, "use_regex", 1, &bad) && !bad) {
            rc = tok_regex_new(GPT2_PATTERN, sizeof GPT2_PATTERN - 1, 0, &s.re, file);
            if (rc) return rc;
        }
    } else if (!strcmp(type, "Metaspace")) {
        s.kind = TOK_PRE_METASPACE;
        const char *r = tok_json_str(j, "replacement", &bad);
        s.split = tok_json_bool(j, "split", 1, &bad);
        if (!r || bad || one_char(r, s.repl, &s.repl_len) || parse_prepend(j, &s.prepend, &bad) ||
            bad) {
            log_error("%s: pre-tokenizer Metaspace needs a one-character \"replacement\" and a "
                      "valid \"prepend_scheme\"",
                      file);
            return ERR_FORMAT;
        }
        if ((rc = tok_regex_new(s.repl, (size_t)s.repl_len, 1, &s.re, file))) return rc;
        s.behavior = TOK_SPLIT_MERGED_NEXT;
    } else if (!strcmp(type, "Digits")) {
        s.kind = TOK_PRE_DIGITS;
        s.individual = tok_json_bool(j, "individual_digits", 0, &bad);
    } else if (!strcmp(type, "Whitespace") || !strcmp(type, "WhitespaceSplit")) {
        int ws = !strcmp(type, "WhitespaceSplit");
        const char *p = ws ? "\\s+" : "\\w+|[^\\w\\s]+";
        s.kind = TOK_PRE_SPLIT;
        s.behavior = TOK_SPLIT_REMOVED;
        s.invert = !ws;
        if ((rc = tok_regex_new(p, strlen(p), 0, &s.re, file))) return rc;
    } else {
        log_error("%s: pre-tokenizer type \"%s\" is not supported", file, type);
        log_hint("dspark handles Split, ByteLevel, Metaspace, Digits, Whitespace, "
                 "WhitespaceSplit and Sequence pre-tokenizers");
        return ERR_UNSUPPORTED;
    }
    if (bad) {
        log_error("%s: pre-tokenizer %s has a field of the wrong type", file, type);
        tok_regex_free(s.re);
        return ERR_FORMAT;
    }
    if (*n >= TOK_MAX_STEPS) {
        log_error("%s: more than %d pre-tokenizers", file, TOK_MAX_STEPS);
        tok_regex_free(s.re);
        return ERR_UNSUPPORTED;
    }
    struct tok_pretok *v = realloc(*steps, (size_t)(*n + 1) * sizeof *v);
    if (!v) {
        tok_regex_free(s.re);
        return ERR_NOMEM;
    }
    *steps = v;
    v[(*n)++] = s;
    return OK;
}

int tok_pretok_parse(const cJSON *j, struct tok_pretok **steps, int *n, const char *file) {
    *steps = NULL;
    *n = 0;
    int rc = parse_one(j, steps, n, file, 0);
    if (rc) {
        tok_pretok_free(*steps, *n);
        *steps = NULL;
        *n = 0;
    }
    return rc;
}

void tok_pretok_free(struct tok_pretok *steps, int n) {
    for (int i = 0; i < n; i++) tok_regex_free(steps[i].re);
    free(steps);
}

/* ---- splitting ---- */

/* Segments of one piece: [start, end) with whether it is a delimiter match. */
struct seg {
    size_t start, end;
    int match;
};

struct segs {
    struct seg *v;
    size_t n, cap;
    size_t last; /* end of the last match */
};

static int segs_add(struct segs *s, size_t start, size_t end, int match) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 32;
        struct seg *v = realloc(s->v, cap * sizeof *v);
        if (!v) return ERR_NOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (struct seg){start, end, match};
    return OK;
}

static int on_match(void *ctx, size_t start, size_t end) {
    struct segs *s = ctx;
    if (start > s->last && segs_add(s, s->last, start, 0)) return ERR_NOMEM;
    if (segs_add(s, start, end, 1)) return ERR_NOMEM;
    s->last = end;
    return OK;
}

/* Applies the delimiter behavior to segs in place (the rules of HF's NormalizedString::split);
 * afterwards segments with match == 2 are dropped, the rest are pieces. */
static void apply_behavior(struct segs *s, enum tok_split_behavior b, int invert) {
    if (invert)
        for (size_t i = 0; i < s->n; i++) s->v[i].match = !s->v[i].match;
    size_t k = 0;
    int prev = 0;
    switch (b) {
    case TOK_SPLIT_ISOLATED:
        return;
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < s->n; i++) s->v[i].match = s->v[i].match ? 2 : 0;
        return;
    case TOK_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < s->n; i++) {
            int m = s->v[i].match;
            if (m && !prev && k)
                s->v[k - 1].end = s->v[i].end;
            else
                s->v[k++] = s->v[i];
            prev = m;
        }
        break;
    case TOK_SPLIT_MERGED_NEXT:
        /* Walk backwards, merging each match into the piece after it. */
        k = s->n;
        for (size_t i = s->n; i-- > 0;) {
            int m = s->v[i].match;
            if (m && !prev && k < s->n)
                s->v[k].start = s->v[i].start;
            else
                s->v[--k] = s->v[i];
            prev = m;
        }
        memmove(s->v, s->v + k, (s->n - k) * sizeof *s->v);
        k = s->n - k;
        break;
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < s->n; i++) {
            int m = s->v[i].match;
            if (m == prev && k)
                s->v[k - 1].end = s->v[i].end;
            else
                s->v[k++] = s->v[i];
            prev = m;
        }
        break;
    }
    s->n = k;
    for (size_t i = 0; i < k; i++) s->v[i].match = 0;
}

static int emit(struct tok_pieces *out, const char *p, const struct segs *s, int first) {
    for (size_t i = 0; i < s->n; i++) {
        if (s->v[i].match == 2) continue;
        int rc = tok_pieces_add(out, p + s->v[i].start, s->v[i].end - s->v[i].start,
                                first && s->v[i].start == 0);
        if (rc) return rc;
    }
    return OK;
}

static int split_regex(const struct tok_regex *re, const char *p, size_t n, struct segs *s) {
    s->n = 0;
    s->last = 0;
    int rc = tok_regex_each(re, p, n, on_match, s);
    if (rc) return rc;
    if (s->last < n) return segs_add(s, s->last, n, 0);
    return OK;
}

static int split_digits(const char *p, size_t n, struct segs *s) {
    s->n = 0;
    size_t i = 0;
    while (i < n) {
        int32_t cp;
        size_t k = (size_t)tok_utf8_next(p + i, n - i, &cp);
        if (segs_add(s, i, i + k, tok_is_numeric(cp))) return ERR_NOMEM;
        i += k;
    }
    return OK;
}

/* ---- running the steps ---- */

static int run_step(const struct tok_pretok *st, const struct tok_piece *pc, const char *p,
                    struct tok_pieces *out, struct segs *s, struct tok_buf *tmp) {
    size_t n = pc->len;
    int first = pc->first, rc;
    switch (st->kind) {
    case TOK_PRE_SPLIT:
        if ((rc = split_regex(st->re, p, n, s))) return rc;
        apply_behavior(s, st->behavior, st->invert);
        return emit(out, p, s, first);
    case TOK_PRE_DIGITS:
        if ((rc = split_digits(p, n, s))) return rc;
        apply_behavior(s, st->individual ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS, 0);
        return emit(out, p, s, first);
    case TOK_PRE_METASPACE:
        /* Spaces become the replacement; then it is prepended unless already there. */
        tmp->n = 0;
        size_t rl = (size_t)st->repl_len;
        int starts = n && (p[0] == ' ' || (n >= rl && !memcmp(p, st->repl, rl)));
        if ((st->prepend == TOK_PREPEND_ALWAYS || (st->prepend == TOK_PREPEND_FIRST && first)) &&
            !starts && tok_buf_add(tmp, st->repl, rl))
            return ERR_NOMEM;
        for (size_t i = 0; i < n; i++) {
            rc = p[i] == ' ' ? tok_buf_add(tmp, st->repl, (size_t)st->repl_len)
                             : tok_buf_add(tmp, p + i, 1);
            if (rc) return rc;
        }
        if (!st->split) return tok_pieces_add(out, tmp->p, tmp->n, first);
        if ((rc = split_regex(st->re, tmp->p, tmp->n, s))) return rc;
        apply_behavior(s, TOK_SPLIT_MERGED_NEXT, 0);
        return emit(out, tmp->p, s, first);
    case TOK_PRE_BYTELEVEL: {
        struct tok_buf src = {0};
        const char *q = p;
        if (st->add_prefix_space && (n == 0 || p[0] != ' ')) {
            if (tok_buf_add(&src, " ", 1) || tok_buf_add(&src, p, n)) {
                tok_buf_free(&src);
                return ERR_NOMEM;
            }
            q = src.p;
            n = src.n;
        }
        s->n = 0;
        if (st->re)
            rc = split_regex(st->re, q, n, s);
        else
            rc = n ? segs_add(s, 0, n, 0) : OK;
        for (size_t i = 0; i < s->n && !rc; i++) {
            tmp->n = 0;
            rc = tok_bytes_to_chars(q + s->v[i].start, s->v[i].end - s->v[i].start, tmp);
            if (!rc) rc = tok_pieces_add(out, tmp->p, tmp->n, first && s->v[i].start == 0);
        }
        tok_buf_free(&src);
        return rc;
    }
    }
    return ERR_UNSUPPORTED;
}

int tok_pretokenize(const struct tok_pretok *steps, int n_steps, struct tok_pieces *in,
                    struct tok_pieces *tmp) {
    struct segs s = {0};
    struct tok_buf buf = {0};
    int rc = OK;
    size_t limit = in->buf.n + 4096;
    for (int k = 0; k < n_steps && !rc; k++) {
        tok_pieces_reset(tmp);
        for (size_t i = 0; i < in->n && !rc; i++) {
            const struct tok_piece *pc = &in->v[i];
            if (pc->id >= 0)
                rc = tok_pieces_add_id(tmp, pc->id);
            else
                rc = run_step(&steps[k], pc, in->buf.p + pc->off, tmp, &s, &buf);
        }
        struct tok_pieces t = *in;
        *in = *tmp;
        *tmp = t;
        if (!rc && in->buf.n / TOK_MAX_GROWTH > limit) {
            log_error("tokenizer: the pre-tokenizer makes the text over %d times longer",
                      TOK_MAX_GROWTH);
            rc = ERR_UNSUPPORTED;
        }
    }
    free(s.v);
    tok_buf_free(&buf);
    return rc;
}
