/* tokenizer/detok.c: streaming detokenization. Each pushed id is decoded on its own
 * (tok_dec_token keeps the little state the decoder steps need), and the bytes go through a
 * UTF-8 filter that holds back an incomplete character until the bytes that finish it arrive,
 * and replaces bytes that can never form a character with U+FFFD. Work per push is O(1) plus
 * the token's length: the history is never decoded again. */
#include "tokenizer/tok_impl.h"

#include "base/err.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

struct detok {
    const struct tokenizer *t;
    struct tok_dec_state st;
    struct tok_buf raw;        /* held-back bytes, then the new token's bytes */
    struct tok_buf scratch[2]; /* for tok_dec_token */
    struct tok_buf out;        /* text returned by the last call */
    unsigned char pend[4];     /* an incomplete character held back */
    int n_pend;
};

struct detok *detok_new(const struct tokenizer *t) {
    struct detok *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->t = t;
    tok_dec_begin(t, &d->st);
    return d;
}

void detok_free(struct detok *d) {
    if (!d) return;
    tok_buf_free(&d->raw);
    tok_buf_free(&d->scratch[0]);
    tok_buf_free(&d->scratch[1]);
    tok_buf_free(&d->out);
    free(d);
}

/* At s[0..n): > 0, the length of a whole valid character; 0, a valid start cut short by the end
 * of the data; < 0, minus the length of an invalid sequence (its maximal valid prefix, >= 1). */
static int char_status(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        need = 2;
    else if (c >= 0xe0 && c <= 0xef)
        need = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4)
        need = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else
        return -1;
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n) return 0;
        if (s[i] < lo || s[i] > hi) return -i;
        lo = 0x80, hi = 0xbf;
    }
    return need;
}

/* Moves the complete text of d->raw into d->out and keeps an incomplete tail in d->pend. */
static int filter(struct detok *d) {
    const unsigned char *s = (const unsigned char *)d->raw.p;
    size_t n = d->raw.n, i = 0, run = 0; /* run: start of the valid bytes not yet copied */
    d->out.n = 0;
    d->n_pend = 0;
    while (i < n) {
        int r = char_status(s + i, n - i);
        if (r > 0) {
            i += (size_t)r;
            continue;
        }
        if (tok_buf_add(&d->out, s + run, i - run)) return ERR_NOMEM;
        if (r == 0) {
            d->n_pend = (int)(n - i);
            memcpy(d->pend, s + i, n - i);
            return OK;
        }
        if (tok_buf_add(&d->out, "\xef\xbf\xbd", 3)) return ERR_NOMEM;
        i += (size_t)-r;
        run = i;
    }
    return tok_buf_add(&d->out, s + run, n - run);
}

int detok_push(struct detok *d, int32_t id, const char **text, size_t *len) {
    *text = "";
    *len = 0;
    if (id < 0 || id >= d->t->n_vocab) {
        log_error("tokenizer: id %d is outside the vocabulary [0, %d)", id, d->t->n_vocab);
        return ERR_ARG;
    }
    d->raw.n = 0;
    int rc = tok_buf_add(&d->raw, d->pend, (size_t)d->n_pend);
    if (!rc) rc = tok_dec_token(d->t, &d->st, id, &d->raw, d->scratch);
    if (!rc) rc = filter(d);
    if (rc) return rc;
    *text = d->out.p;
    *len = d->out.n;
    return OK;
}

int detok_flush(struct detok *d, const char **text, size_t *len) {
    d->out.n = 0;
    int rc = tok_buf_add(&d->out, d->n_pend ? "\xef\xbf\xbd" : "", d->n_pend ? 3 : 0);
    d->n_pend = 0;
    tok_dec_begin(d->t, &d->st);
    *text = rc ? "" : d->out.p;
    *len = rc ? 0 : d->out.n;
    return rc;
}
