/* spec/dspark.c: DSpark drafts. The block [anchor, mask x (B-1)] gives B hidden rows; row i
 * predicts the token after position P+i. Drafts are taken left to right, each row's logits
 * corrected by the Markov head's bias for the previous token (W2 · W1[prev], prev of row 0 =
 * the anchor); only the rows that may be verified go through lm_head, in one pass. The
 * confidence head, which depends on the previous token only, can end the block early.
 * Several sequences draft together: their rows share the lm_head pass, and the Markov biases
 * of one draft position share a pass; each sequence's steps are those it takes alone. */
#include "spec/block_drafter.h"

#include <math.h>

struct walk {
    double survival; /* the chance that every draft so far is kept */
    int32_t prev;
    int live;
    int use_conf, want_conf;
};

/* The confidence test before draft i: 0 when the block ends here. */
static int confident(struct block_drafter *b, struct walk *w, int i, struct draft *out) {
    if (!w->want_conf) return 1;
    const float *h = b->hidden + (size_t)i * block_model_config(b->bm)->hidden_size;
    double conf = 1 / (1 + exp(-(double)block_confidence_logit(b->st, h, w->prev)));
    w->survival *= conf;
    float t = b->o.confidence_threshold;
    if (w->use_conf && (b->o.per_slot ? conf < t : (w->survival < t && out->n > 0))) return 0;
    if (out->conf) out->conf[i] = (float)w->survival;
    return 1;
}

void dspark_draft(struct block_drafter *const *bs, const int *k, struct draft *const *outs, int n,
                  int have_logits) {
    struct block_model *bm = bs[0]->bm;
    int V = block_model_config(bm)->vocab_size, markov = block_has_markov(bm);
    const float *hid[BLOCK_MAX_BATCH];
    float *lg[BLOCK_MAX_BATCH], *bias[BLOCK_MAX_BATCH];
    struct walk w[BLOCK_MAX_BATCH];
    int32_t prev[BLOCK_MAX_BATCH];
    int act[BLOCK_MAX_BATCH], kmax = 0;
    for (int s = 0; s < n; s++) {
        struct block_drafter *b = bs[s];
        hid[s] = b->hidden, lg[s] = b->logits;
        int has = block_has_confidence(bm);
        w[s] = (struct walk){1, b->ids[0], 1, b->o.confidence_threshold > 0 && has, 0};
        /* out->conf asks for the survival products (load-aware verification) */
        w[s].want_conf = has && (w[s].use_conf || outs[s]->conf);
        kmax = k[s] > kmax ? k[s] : kmax;
    }
    /* the base logits of every row that may be verified, in shared passes over lm_head */
    if (!have_logits) block_logits_batch(bm, hid, k, lg, n);
    for (int i = 0; i < kmax; i++) {
        int m = 0;
        for (int s = 0; s < n; s++) {
            if (!w[s].live || i >= k[s]) continue;
            if (!(w[s].live = confident(bs[s], &w[s], i, outs[s]))) continue;
            prev[m] = w[s].prev, bias[m] = bs[s]->bias, act[m++] = s;
        }
        if (!m) break;
        if (markov) block_markov_bias_batch(bm, prev, m, bias);
        for (int j = 0; j < m; j++) {
            struct block_drafter *b = bs[act[j]];
            struct draft *out = outs[act[j]];
            float *logits = b->logits + (size_t)i * V;
            if (markov)
                for (int v = 0; v < V; v++) logits[v] += b->bias[v];
            int32_t id = block_pick(b, logits, i, &out->q[i]);
            if (id < 0) {
                w[act[j]].live = 0;
                continue;
            }
            out->ids[i] = id;
            out->n = i + 1;
            w[act[j]].prev = id;
        }
    }
}
