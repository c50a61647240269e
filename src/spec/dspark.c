/* spec/dspark.c: DSpark drafts. The block [anchor, mask x (B-1)] gives B hidden rows; row i
 * predicts the token after position P+i. Drafts are taken left to right, each row's logits
 * corrected by the Markov head's bias for the previous token (W2 · W1[prev], prev of row 0 =
 * the anchor); only the rows that may be verified go through lm_head, in one pass. The
 * confidence head, which depends on the previous token only, can end the block early. */
#include "spec/block_drafter.h"

#include <math.h>

int dspark_propose(struct block_drafter *b, const int32_t *seq, int n_seq, int n_max,
                   struct draft *out) {
    const struct hf_config *c = block_model_config(b->bm);
    int B = c->block_size, V = c->vocab_size, H = c->hidden_size;
    int32_t anchor = seq[n_seq - 1];
    b->ids[0] = anchor;
    for (int i = 1; i < B; i++) b->ids[i] = c->mask_token_id;
    int rc = block_forward(b->st, b->ids, B, b->hidden, NULL);
    if (rc) return rc;
    int k = n_max < B ? n_max : B;
    /* the base logits of every row that may be verified, in one pass over lm_head */
    block_logits(b->st, b->hidden, k, b->logits);
    float t = b->o.confidence_threshold;
    int use_conf = t > 0 && block_has_confidence(b->bm);
    /* out->conf asks for the survival products (load-aware verification) */
    int want_conf = block_has_confidence(b->bm) && (use_conf || out->conf);
    double survival = 1;
    int32_t prev = anchor;
    int n = 0;
    for (int i = 0; i < k; i++) {
        const float *h = b->hidden + (size_t)i * H;
        if (want_conf) {
            double conf = 1 / (1 + exp(-(double)block_confidence_logit(b->st, h, prev)));
            survival *= conf;
            if (use_conf && (b->o.per_slot ? conf < t : (survival < t && n > 0))) break;
            if (out->conf) out->conf[i] = (float)survival;
        }
        float *logits = b->logits + (size_t)i * V;
        if (block_has_markov(b->bm)) {
            block_markov_bias(b->st, prev, b->bias);
            for (int v = 0; v < V; v++) logits[v] += b->bias[v];
        }
        int32_t id = block_pick(b, logits, i, &out->q[i]);
        if (id < 0) break;
        out->ids[i] = id;
        out->n = ++n;
        prev = id;
    }
    return OK;
}
