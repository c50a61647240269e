/* spec/block_drafter.c: the drafter shell around a DSpark or DFlash block model: it appends
 * the target's taps of committed positions to the context (observe), runs the block at the
 * pending token's position, and hands the drafts to verify. The context only ever grows
 * during a sequence: rejected drafts never reach it, since only committed positions are
 * observed. */
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

static int bd_propose(struct drafter *d, const int32_t *seq, int n_seq, int n_max,
                      struct draft *out) {
    struct block_drafter *b = self(d);
    out->n = 0;
    if (n_max > b->o.max_draft) n_max = b->o.max_draft;
    /* the context must hold every position before the pending token */
    if (b->broken || n_max <= 0 || block_state_len(b->st) != n_seq - 1) return OK;
    if (block_state_len(b->st) + block_model_config(b->bm)->block_size > b->o.cap) return OK;
    return block_model_config(b->bm)->arch == ARCH_DSPARK
               ? dspark_propose(b, seq, n_seq, n_max, out)
               : dflash_propose(b, seq, n_seq, n_max, out);
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
};
static const struct drafter_ops dflash_ops = {
    .name = "dflash",
    .propose = bd_propose,
    .reset = bd_reset,
    .free = bd_free,
    .observe = bd_observe,
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
