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
    float *logits; /* [rows, vocab]: the last run's logits (the last row's first, after feed) */
    int rows;      /* rows the logits buffer holds: a batched catch-up of up to that many */
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

/* The longest prefix of seq the cache can keep (leaving at least one token to feed); rolls
 * the cache back to it. */
static int roll_back(struct dm_drafter *x, const int32_t *seq, int n_seq) {
    int keep = kv_len(x->kv);
    if (keep > n_seq - 1) keep = n_seq - 1;
    for (int i = 0; i < keep; i++) {
        if (x->held[i] != seq[i]) {
            keep = i;
            break;
        }
    }
    kv_truncate(x->kv, keep);
    return keep;
}

static int dm_propose(struct drafter *d, const int32_t *seq, int n_seq, int n_max,
                      struct draft *out) {
    struct dm_drafter *x = d->ctx;
    out->n = 0;
    if (n_max > x->max_draft) n_max = x->max_draft;
    if (n_max <= 0 || n_seq <= 0) return OK;
    if (n_seq + n_max > x->cap) return OK; /* no room left: let the target go alone */
    /* longest common prefix of the cache and the sequence, leaving at least one token to feed */
    int keep = roll_back(x, seq, n_seq);
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

/* Batched proposals: the catch-up feeds of all sequences (those short enough for the logits
 * buffer) in one pass of the model, then one pass per draft position over the sequences still
 * drafting. The model's kernels are batch-invariant, so every drafter sees the logits it would
 * see alone and proposes the same tokens. */
static int dm_propose_batch(struct drafter *const *ds, const int32_t *const *seqs,
                            const int *n_seqs, const int *n_max, struct draft *const *outs, int n) {
    struct dm_drafter *x0 = ds[0]->ctx;
    int same = 1;
    for (int i = 1; i < n; i++) same &= ((struct dm_drafter *)ds[i]->ctx)->m == x0->m;
    struct model_batch_item *items = same ? malloc(sizeof *items * (size_t)n) : NULL;
    int *want = same ? malloc(sizeof *want * (size_t)n * 2) : NULL, *who = want ? want + n : NULL;
    if (!items || !want) { /* different models, or no memory: one at a time */
        free(items), free(want);
        for (int i = 0; i < n; i++) {
            int rc = dm_propose(ds[i], seqs[i], n_seqs[i], n_max[i], outs[i]);
            if (rc) return rc;
        }
        return OK;
    }
    int rc = OK, k = 0, most = 0;
    for (int i = 0; i < n && !rc; i++) { /* catch up */
        struct dm_drafter *x = ds[i]->ctx;
        outs[i]->n = 0;
        want[i] = n_max[i] < x->max_draft ? n_max[i] : x->max_draft;
        if (want[i] <= 0 || n_seqs[i] <= 0 || n_seqs[i] + want[i] > x->cap) {
            want[i] = 0;
            continue;
        }
        most = want[i] > most ? want[i] : most;
        int keep = roll_back(x, seqs[i], n_seqs[i]), nf = n_seqs[i] - keep;
        memcpy(x->held + keep, seqs[i] + keep, sizeof(int32_t) * (size_t)nf);
        if (nf <= x->rows) {
            who[k] = i;
            items[k++] = (struct model_batch_item){x->kv, seqs[i] + keep, nf, x->logits,
                                                   NULL,  NULL,           0,  NULL};
        } else /* a long catch-up (the prompt): on its own, last row only */
            rc = model_forward(x->m, x->kv, seqs[i] + keep, nf, x->logits, 0);
    }
    if (!rc && k) rc = model_forward_batch(x0->m, items, k);
    for (int j = 0; j < k && !rc; j++) { /* the last row's logits first */
        struct dm_drafter *x = ds[who[j]]->ctx;
        if (items[j].n > 1)
            memmove(x->logits, x->logits + (size_t)(items[j].n - 1) * x->vocab,
                    sizeof(float) * (size_t)x->vocab);
    }
    for (int d = 0; d < most && !rc; d++) { /* one draft position for every sequence */
        k = 0;
        for (int i = 0; i < n; i++) {
            struct dm_drafter *x = ds[i]->ctx;
            if (d >= want[i] || outs[i]->n < d) continue; /* done, or stopped early */
            int32_t id = pick(x, d, &outs[i]->q[d]);
            if (id < 0) continue;
            outs[i]->ids[d] = id;
            outs[i]->n = d + 1;
            if (d + 1 < want[i]) {
                x->held[kv_len(x->kv)] = id;
                items[k++] = (struct model_batch_item){
                    x->kv, &outs[i]->ids[d], 1, x->logits, NULL, NULL, 0, NULL};
            }
        }
        if (k) rc = model_forward_batch(x0->m, items, k);
    }
    free(items);
    free(want); /* and who */
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
    .propose_batch = dm_propose_batch,
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
    x->rows = max_draft + 2; /* a round's committed tokens: the accepted drafts and two more */
    x->logits = malloc(sizeof(float) * (size_t)x->vocab * (size_t)x->rows);
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
