/* tokenizer/encode.c: tokenizer_encode(), the encoding pipeline of HF's Tokenizer::encode with
 * add_special_tokens = false: added tokens are split off the raw text, each remaining piece is
 * normalized, added tokens with normalized = true are split off the normalized text, then the
 * pre-tokenizer cuts pieces into pre-tokens and BPE turns each into ids. */
#include "tokenizer/tok_impl.h"

#include "base/err.h"

#include <stdlib.h>

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, int32_t **ids,
                     int *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    struct tok_pieces a = {0}, b = {0};
    struct tok_buf norm = {0};
    struct tok_ids out = {0};
    int rc = OK;
    if (len > (size_t)INT32_MAX / 2) return ERR_ARG;
    if ((rc = tok_pieces_add(&b, text, len, 1))) goto done;
    if ((rc = tok_split_added(t, &t->trie_raw, &b, &a))) goto done;
    /* a: raw pieces and ids -> b: normalized pieces and ids */
    tok_pieces_reset(&b);
    for (size_t i = 0; i < a.n && !rc; i++) {
        const struct tok_piece *pc = &a.v[i];
        if (pc->id >= 0) {
            rc = tok_pieces_add_id(&b, pc->id);
        } else if (!(rc = tok_normalize(t->norm, t->n_norm, a.buf.p + pc->off, pc->len, &norm))) {
            rc = tok_pieces_add(&b, norm.p, norm.n, pc->first);
        }
    }
    if (rc || (rc = tok_split_added(t, &t->trie_norm, &b, &a))) goto done;
    if ((rc = tok_pretokenize(t->pretok, t->n_pretok, &a, &b))) goto done;
    for (size_t i = 0; i < a.n && !rc; i++) {
        const struct tok_piece *pc = &a.v[i];
        if (pc->id >= 0)
            rc = tok_ids_add(&out, pc->id);
        else
            rc = tok_bpe(t, a.buf.p + pc->off, pc->len, &out);
    }
    if (!rc && out.n > INT32_MAX) rc = ERR_NOMEM;
done:
    tok_pieces_free(&a);
    tok_pieces_free(&b);
    tok_buf_free(&norm);
    if (rc) {
        free(out.v);
        return rc;
    }
    if (!out.v) out.v = malloc(sizeof *out.v); /* a valid array even when empty */
    if (!out.v) return ERR_NOMEM;
    *ids = out.v;
    *n_ids = (int)out.n;
    return OK;
}
