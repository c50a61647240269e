/* spec/dflash.c: DFlash drafts. The block [anchor, mask x (B-1)] gives B hidden rows; row i
 * (i >= 1) predicts the token at its own position P+i, so a block yields B-1 drafts, each
 * taken from its own row independently (row 0 is unused). Only the rows that will be
 * verified go through lm_head. */
#include "spec/block_drafter.h"

int dflash_propose(struct block_drafter *b, const int32_t *seq, int n_seq, int n_max,
                   struct draft *out) {
    const struct hf_config *c = block_model_config(b->bm);
    int B = c->block_size, V = c->vocab_size, H = c->hidden_size;
    b->ids[0] = seq[n_seq - 1];
    for (int i = 1; i < B; i++) b->ids[i] = c->mask_token_id;
    int rc = block_forward(b->st, b->ids, B, b->hidden, NULL);
    if (rc) return rc;
    int k = n_max < B - 1 ? n_max : B - 1;
    block_logits(b->st, b->hidden + H, k, b->logits);
    for (int i = 0; i < k; i++) {
        int32_t id = block_pick(b, b->logits + (size_t)i * V, i, &out->q[i]);
        if (id < 0) break;
        out->ids[i] = id;
        out->n = i + 1;
    }
    return OK;
}
