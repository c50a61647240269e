/* spec/draft_model.c: a small autoregressive model drafting for a larger one that shares its
 * tokenizer. Its KV cache mirrors a prefix of the sequence: each proposal first rolls the
 * cache back to the longest prefix it shares with the committed sequence (the drafts the
 * target rejected fall away), feeds the missing tokens in one pass, then drafts one token per
 * step. Greedy drafts are one-hot; with temperature > 0 drafts are drawn from the draft
 * model's truncated distribution, which is reported for the acceptance test. */
#include "spec/drafter.h"

#include "base/err.h"
#include "model/model.h"
#include "sample/dist.h"
#include "sample/rng.h"
#include "sample/sampler.h"

#include <stdlib.h>
#include <string.h>

struct dm_drafter {
    struct model *m;
    struct kv_cache *kv;
    int32_t *held; /* [cap] the tokens whose K/V the cache holds, in order */
    int cap;       /* cache positions */
    float *logits; /* [vocab] */
    struct sample_params sp;
    struct rng rng;
    struct sample_dist *dists; /* [max_draft] one per draft position */
    void *dist_mem;
    int max_draft, vocab;
};

static void dm_reset(struct drafter *d) {
    struct dm_drafter *x = d->ctx;
    kv_truncate(x->kv, 0);
    rng_seed(&x->rng, x->sp.seed ^ 0x5bd1e995u);
}

/* Runs ids[0..n) after the cache's contents, keeping `held` in step; logits of the last row. */
static int feed(struct dm_drafter *x, const int32_t *ids, int n) {
    int at = kv_len(x->kv);
    int rc = model_forward(x->m, x->kv, ids, n, x->logits, 0);
    if (rc) return rc;
    memcpy(x->held + at, ids, sizeof(int32_t) * (size_t)n);
    return OK;
}

static int32_t pick(struct dm_drafter *x, int i, const struct sample_dist **q) {
    if (x->sp.temperature <= 0) {
        *q = NULL;
        return sample_greedy(x->logits, x->vocab);
    }
    struct sample_dist *dist = &x->dists[i];
    if (sample_dist_build(dist, x->logits, x->sp.temperature, x->sp.top_k, x->sp.top_p)) return -1;
    *q = dist;
    return sample_dist_draw(dist, &x->rng);
}

static int dm_propose(struct drafter *d, const int32_t *seq, int n_seq, int n_max,
                      struct draft *out) {
    struct dm_drafter *x = d->ctx;
    out->n = 0;
    if (n_max > x->max_draft) n_max = x->max_draft;
    if (n_max <= 0 || n_seq <= 0) return OK;
    if (n_seq + n_max > x->cap) return OK; /* no room left: let the target go alone */
    /* longest common prefix of the cache and the sequence, leaving at least one token to feed */
    int keep = kv_len(x->kv);
    if (keep > n_seq - 1) keep = n_seq - 1;
    for (int i = 0; i < keep; i++) {
        if (x->held[i] != seq[i]) {
            keep = i;
            break;
        }
    }
    kv_truncate(x->kv, keep);
    int rc = feed(x, seq + keep, n_seq - keep);
    for (int i = 0; !rc && i < n_max; i++) {
        int32_t id = pick(x, i, &out->q[i]);
        if (id < 0) break;
        out->ids[i] = id;
        out->n = i + 1;
        if (i + 1 < n_max) rc = feed(x, &id, 1);
    }
    return rc;
}

static void dm_free(struct drafter *d) {
    struct dm_drafter *x = d->ctx;
    if (!x) return;
    kv_free(x->kv);
    free(x->held);
    free(x->logits);
    free(x->dists);
    free(x->dist_mem);
    free(x);
    d->ctx = NULL;
}

static const struct drafter_ops dm_ops = {
    .name = "draft",
    .propose = dm_propose,
    .reset = dm_reset,
    .free = dm_free,
};

int draft_model_drafter_new(struct model *dm, const struct sample_params *sp, int max_draft,
                            struct drafter *out) {
    if (max_draft < 1) return ERR_ARG;
    struct dm_drafter *x = calloc(1, sizeof *x);
    if (!x) return ERR_NOMEM;
    out->ops = &dm_ops;
    out->ctx = x;
    x->m = dm;
    x->sp = *sp;
    x->max_draft = max_draft;
    x->vocab = model_config(dm)->vocab_size;
    int rc = kv_new(dm, 0, &x->kv);
    if (rc) goto fail;
    x->cap = kv_capacity(x->kv);
    size_t db = sample_dist_bytes(x->vocab);
    x->held = malloc(sizeof(int32_t) * (size_t)x->cap);
    x->logits = malloc(sizeof(float) * (size_t)x->vocab);
    x->dists = calloc((size_t)max_draft, sizeof *x->dists);
    x->dist_mem = sp->temperature > 0 ? malloc(db * (size_t)max_draft) : NULL;
    if (!x->held || !x->logits || !x->dists || (sp->temperature > 0 && !x->dist_mem)) {
        rc = ERR_NOMEM;
        goto fail;
    }
    if (x->dist_mem)
        for (int i = 0; i < max_draft; i++)
            sample_dist_init(&x->dists[i], (char *)x->dist_mem + db * (size_t)i, x->vocab);
    dm_reset(out);
    return OK;
fail:
    dm_free(out);
    return rc;
}
