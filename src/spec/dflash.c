/* spec/dflash.c: DFlash drafts. The block [anchor, mask x (B-1)] gives B hidden rows; row i
 * (i >= 1) predicts the token at its own position P+i, so a block yields B-1 drafts, each
 * taken from its own row independently (row 0 is unused). Only the rows that will be
 * verified go through lm_head, those of all the sequences drafting together in shared
 * passes. */
#include "spec/block_drafter.h"

void dflash_draft(struct block_drafter *const *bs, const int *k, struct draft *const *outs, int n,
                  int have_logits) {
    const struct hf_config *c = block_model_config(bs[0]->bm);
    int V = c->vocab_size, H = c->hidden_size;
    const float *hid[BLOCK_MAX_BATCH];
    float *lg[BLOCK_MAX_BATCH];
    for (int s = 0; s < n; s++) hid[s] = bs[s]->hidden + H, lg[s] = bs[s]->logits;
    if (!have_logits) block_logits_batch(bs[0]->bm, hid, k, lg, n);
    const size_t row1 = have_logits ? (size_t)V : 0; /* the logits of row 1 (all rows came) */
    for (int s = 0; s < n; s++)
        for (int i = 0; i < k[s]; i++) {
            int32_t id = block_pick(bs[s], bs[s]->logits + row1 + (size_t)i * V, i, &outs[s]->q[i]);
            if (id < 0) break;
            outs[s]->ids[i] = id;
            outs[s]->n = i + 1;
        }
}
