/* spec/block_drafter.c: the drafter shell around a DSpark or DFlash block model: it appends
 * the target's taps of committed positions to the context (observe), runs the block at the
 * pending token's position (the blocks of many sequences in one pass: propose_batch), and
 * hands the drafts to verify. The context only ever grows during a sequence: rejected drafts
 * never reach it, since only committed positions are observed. It can be saved as rows with a
 * prefix-cache entry and loaded into a new sequence (ctx_save, ctx_load). */
#include "spec/block_drafter.h"

#include "base/err.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

int32_t block_pick(struct block_drafter *b, const float *logits, int i,
                   const struct sample_dist **q) {
    int V = block_model_config(b->bm)->vocab_size;
    if (b->sp.temperature <= 0) {
        *q = NULL;
        return sample_greedy(logits, V);
    }
    struct sample_dist *d = &b->dists[i];
    if (sample_dist_build(d, logits, b->sp.temperature, b->sp.top_k, b->sp.top_p)) return -1;
    *q = d;
    return sample_dist_draw(d, &b->rng);
}

static struct block_drafter *self(struct drafter *d) {
    return d->ctx;
}

/* Drafts for n (<= BLOCK_MAX_BATCH) sequences: the blocks of those that can draft run in one
 * pass of each model they use (normally all share one), then their drafts are taken
 * together. Alone is the case n = 1, so a sequence gets the same drafts either way. */
static int propose_group(struct drafter *const *ds, const int32_t *const *seqs, const int *n_seqs,
                         const int *n_max, struct draft *const *outs, int n) {
    struct block_drafter *bs[BLOCK_MAX_BATCH];
    struct block_state *sts[BLOCK_MAX_BATCH];
    const int32_t *ids[BLOCK_MAX_BATCH];
    float *hid[BLOCK_MAX_BATCH], *lgs[BLOCK_MAX_BATCH];
    struct draft *os[BLOCK_MAX_BATCH];
    int ks[BLOCK_MAX_BATCH], done[BLOCK_MAX_BATCH] = {0};
    for (int i = 0; i < n; i++) outs[i]->n = 0;
    for (int first = 0; first < n; first++) { /* one pass per model, in order of first use */
        struct block_model *bm = NULL;
        int m = 0;
        for (int i = first; i < n; i++) {
            struct block_drafter *b = self(ds[i]);
            if (done[i] || (bm && b->bm != bm)) continue;
            done[i] = 1;
            const struct hf_config *c = block_model_config(b->bm);
            int B = c->block_size, k = n_max[i] < b->o.max_draft ? n_max[i] : b->o.max_draft;
            int most = c->arch == ARCH_DSPARK ? B : B - 1; /* DFlash's row 0 drafts nothing */
            if (k > most) k = most;
            /* the context must hold every position before the pending token */
            int len = block_state_len(b->st);
            if (b->broken || k <= 0 || len != n_seqs[i] - 1 || len + B > b->o.cap) continue;
            bm = b->bm;
            b->ids[0] = seqs[i][n_seqs[i] - 1];
            for (int j = 1; j < B; j++) b->ids[j] = c->mask_token_id;
            bs[m] = b, sts[m] = b->st, ids[m] = b->ids, hid[m] = b->hidden, os[m] = outs[i];
            lgs[m] = b->logits;
            ks[m++] = k;
        }
        if (!m) continue;
        const struct hf_config *c = block_model_config(bm);
        int have = block_logits_in_forward(bm); /* every row's logits come with the pass */
        int rc = block_forward_batch(sts, ids, m, c->block_size, hid, have ? lgs : NULL);
        if (rc) return rc;
        if (c->arch == ARCH_DSPARK)
            dspark_draft(bs, ks, os, m, have);
        else
            dflash_draft(bs, ks, os, m, have);
    }
    return OK;
}

static int bd_propose_batch(struct drafter *const *ds, const int32_t *const *seqs,
                            const int *n_seqs, const int *n_max, struct draft *const *outs, int n) {
    for (int first = 0; first < n; first += BLOCK_MAX_BATCH) {
        int m = n - first < BLOCK_MAX_BATCH ? n - first : BLOCK_MAX_BATCH;
        int rc =
            propose_group(ds + first, seqs + first, n_seqs + first, n_max + first, outs + first, m);
        if (rc) return rc;
    }
    return OK;
}

static int bd_propose(struct drafter *d, const int32_t *seq, int n_seq, int n_max,
                      struct draft *out) {
    return propose_group(&d, &seq, &n_seq, &n_max, &out, 1);
}

static int bd_observe(struct drafter *d, const float *taps, int pos0, int n) {
    struct block_drafter *b = self(d);
    int len = block_state_len(b->st);
    if (pos0 > len || pos0 + n <= len) { /* a gap, or nothing new */
        if (pos0 > len) b->broken = 1;
        return OK;
    }
    int skip = len - pos0;
    int H = block_model_config(b->bm)->hidden_size;
    const float *from = taps + (size_t)skip * (size_t)d->n_taps * (size_t)H;
    int rc = block_ctx_append(b->st, from, n - skip, NULL);
    if (rc) b->broken = 1; /* the context is full: go on without drafts */
    return OK;
}

static int bd_ctx_save(struct drafter *d, float *rows, int n) {
    return block_ctx_save(self(d)->st, rows, n);
}

/* The context of positions 0..n, saved by bd_ctx_save() from a drafter of the same model. */
static int bd_ctx_load(struct drafter *d, const float *rows, int n) {
    struct block_drafter *b = self(d);
    int rc = block_ctx_load(b->st, rows, n);
    if (rc) b->broken = 1;
    return rc;
}

static void bd_reset(struct drafter *d) {
    struct block_drafter *b = self(d);
    block_state_reset(b->st);
    b->broken = 0;
    rng_seed(&b->rng, b->sp.seed ^ 0x2545f4914f6cdd1dull);
}

static void bd_free(struct drafter *d) {
    struct block_drafter *b = self(d);
    if (!b) return;
    block_state_free(b->st);
    free(b->dists), free(b->dist_mem), free(b->ids), free(b->hidden), free(b->logits);
    free(b->bias);
    free(b);
    d->ctx = NULL;
}

static const struct drafter_ops dspark_ops = {
    .name = "dspark",
    .propose = bd_propose,
    .reset = bd_reset,
    .free = bd_free,
    .observe = bd_observe,
    .propose_batch = bd_propose_batch,
    .ctx_save = bd_ctx_save,
    .ctx_load = bd_ctx_load,
};
static const struct drafter_ops dflash_ops = {
    .name = "dflash",
    .propose = bd_propose,
    .reset = bd_reset,
    .free = bd_free,
    .observe = bd_observe,
    .propose_batch = bd_propose_batch,
    .ctx_save = bd_ctx_save,
    .ctx_load = bd_ctx_load,
};

int block_drafter_new(struct block_model *bm, const struct sample_params *sp,
                      const struct block_drafter_opts *o, struct drafter *out) {
    const struct hf_config *c = block_model_config(bm);
    struct block_drafter *b = calloc(1, sizeof *b);
    if (!b) return ERR_NOMEM;
    out->ops = c->arch == ARCH_DSPARK ? &dspark_ops : &dflash_ops;
    out->ctx = b;
    out->tap_layers = c->target_layer_ids;
    out->n_taps = c->n_target_layer_ids;
    out->ctx_width = block_ctx_width(bm);
    out->ctx_tag = block_model_fingerprint(bm); /* 0 (no saved contexts) only without memory */
    b->bm = bm;
    b->o = *o;
    b->sp = *sp;
    int B = c->block_size, V = c->vocab_size, H = c->hidden_size;
    int rc = block_state_new(bm, o->cap, &b->st);
    if (rc) goto fail;
    size_t db = sample_dist_bytes(V);
    b->dists = calloc((size_t)B, sizeof *b->dists);
    b->dist_mem = sp->temperature > 0 ? malloc(db * (size_t)B) : NULL;
    b->ids = malloc(sizeof(int32_t) * (size_t)B);
    b->hidden = malloc(sizeof(float) * (size_t)B * H);
    b->logits = malloc(sizeof(float) * (size_t)B * V);
    b->bias = malloc(sizeof(float) * (size_t)V);
    if (!b->dists || (sp->temperature > 0 && !b->dist_mem) || !b->ids || !b->hidden || !b->logits ||
        !b->bias) {
        rc = ERR_NOMEM;
        goto fail;
    }
    if (b->dist_mem)
        for (int i = 0; i < B; i++)
            sample_dist_init(&b->dists[i], (char *)b->dist_mem + db * (size_t)i, V);
    bd_reset(out);
    return OK;
fail:
    bd_free(out);
    return rc;
}
