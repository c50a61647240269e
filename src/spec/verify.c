/* spec/verify.c: see verify.h. */
#include "spec/verify.h"

#include "backend/gpu.h"
#include "base/err.h"
#include "base/log.h"
#include "model/model.h"
#include "sample/dist.h"
#include "sample/penalty.h"
#include "sample/residual.h"
#include "sample/rng.h"
#include "sample/sampler.h"

#include <stdlib.h>
#include <string.h>

static int penalties(const struct sample_params *sp) {
    return sp->presence_penalty != 0.0f || sp->frequency_penalty != 0.0f;
}

int verify_init(struct verify *v, struct model *m, struct kv_cache *kv, struct sampler *s,
                int max_draft, int top_logprobs, int tap_width) {
    memset(v, 0, sizeof *v);
    int V = model_config(m)->vocab_size;
    v->m = m;
    v->kv = kv;
    v->s = s;
    v->max_draft = max_draft < 0 ? 0 : max_draft > VERIFY_MAX_DRAFT ? VERIFY_MAX_DRAFT : max_draft;
    v->top_logprobs = top_logprobs;
    v->logits = malloc(sizeof(float) * (size_t)V * (size_t)(v->max_draft + 1));
    v->raw = malloc(sizeof(float) * (size_t)V);
    v->dense = calloc((size_t)V, sizeof(float));
    if (tap_width > 0)
        v->taps = malloc(sizeof(float) * (size_t)tap_width * (size_t)(v->max_draft + 1));
    v->ids = calloc((size_t)(v->max_draft + 1), sizeof(int32_t));
    const struct sample_params *sp = sampler_params(s);
    v->greedy_ids = model_on_gpu(m) && sp->temperature <= 0 && sp->presence_penalty == 0 &&
                    sp->frequency_penalty == 0 && top_logprobs < 0;
    const char *env = getenv("DSPARK_GPU_SAMPLE_SUMMARY");
    /* greedy rounds with penalties: the device applies them and takes each row's argmax */
    int summaries = model_on_gpu(m) && (sp->temperature > 0 || penalties(sp)) && top_logprobs < 0 &&
                    !(env && !strcmp(env, "0"));
    if (summaries && v->logits) {
        size_t rows = (size_t)v->max_draft + 1;
        v->req = calloc(1, sizeof *v->req + rows * sizeof(struct gpu_row_summary) +
                               rows * GPU_SAMPLE_CAP * (sizeof(int32_t) + sizeof(float)));
        if (!v->req) {
            verify_deinit(v);
            return ERR_NOMEM;
        }
        struct gpu_row_summary *r = (struct gpu_row_summary *)(v->req + 1);
        int32_t *ids = (int32_t *)(r + rows);
        float *lg = (float *)(ids + rows * GPU_SAMPLE_CAP);
        for (size_t i = 0; i < rows; i++)
            r[i].ids = ids + i * GPU_SAMPLE_CAP, r[i].logits = lg + i * GPU_SAMPLE_CAP;
        *v->req = (struct gpu_sample_req){
            .temperature = sp->temperature, .top_k = sp->top_k, .top_p = sp->top_p, .rows = r};
        if (penalties(sp)) { /* the drafts' entries: row r has at most r */
            size_t ext = rows * (rows - 1) / 2 + 1;
            v->ext_at = malloc(sizeof(int) * rows), v->ext_n = malloc(sizeof(int) * rows);
            v->ext_ids = malloc(sizeof(int32_t) * ext), v->ext_amt = malloc(sizeof(float) * ext);
            if (!v->ext_at || !v->ext_n || !v->ext_ids || !v->ext_amt) {
                verify_deinit(v);
                return ERR_NOMEM;
            }
        }
    }
    if (!v->logits || !v->raw || !v->dense || (tap_width > 0 && !v->taps) || !v->ids) {
        verify_deinit(v);
        return ERR_NOMEM;
    }
    return OK;
}

void verify_deinit(struct verify *v) {
    free(v->logits);
    free(v->raw);
    free(v->dense);
    free(v->taps);
    free(v->ids);
    free(v->req);
    free(v->pen_ids), free(v->pen_amt);
    free(v->ext_at), free(v->ext_n), free(v->ext_ids), free(v->ext_amt);
    memset(v, 0, sizeof *v);
}

/* Row i's logits, brought back from the device when the pass sent only its summary */
static int fetch_row(struct verify *v, int i, float *row) {
    if (v->req->rows[i].in_logits) return OK; /* it came back with the summaries */
    v->n_fetched++;
    int rc = model_logits_row(v->m, v->req, i, row);
    if (rc) log_error("a sampled row's logits are no longer on the GPU");
    return rc;
}

/* Row i's target distribution: from its summary where that suffices, else from its logits */
static int row_dist(struct verify *v, float *row, int i, const struct sample_dist **p) {
    if (v->req && v->req->filled) {
        const struct gpu_row_summary *g = &v->req->rows[i];
        struct sample_row_summary sum = {g->max, g->total, g->n, g->ids, g->logits};
        int rc = sampler_build_dist_sparse(v->s, &sum, v->req->penalised, p);
        if (rc != ERR_UNSUPPORTED) return rc;
        if ((rc = fetch_row(v, i, row))) return rc;
        /* the device penalised the row it kept */
        if (v->req->penalised) return sampler_build_dist_penalised(v->s, row, p);
    }
    return sampler_build_dist(v->s, row, NULL, 0, p);
}

static int unusable(int rc) {
    log_error("the model produced unusable logits (NaN or infinite)");
    return rc;
}

/* Whether the sampler keeps every token: then a draft's probability comes from the summary's
 * max, total and the draft's logit, and only a draw needs the row */
static int untruncated(const struct sample_params *sp, int V) {
    return sample_untruncated(sp->top_k, sp->top_p, V);
}

/* Decides row i: returns the token to commit and whether it is the draft (accepted). */
static int decide(struct verify *v, float *row, const struct draft *d, int i, int32_t *id,
                  int *accepted) {
    const struct sample_params *sp = sampler_params(v->s);
    int V = model_config(v->m)->vocab_size;
    int has_draft = i < d->n;
    *accepted = 0;
    if (sp->temperature <= 0) {
        if (v->req && v->req->filled) { /* the device's argmax of the penalised row */
            *id = v->req->rows[i].drawn;
            *accepted = has_draft && d->ids[i] == *id;
            return OK;
        }
        penalty_apply(sampler_counts(v->s), sp->presence_penalty, sp->frequency_penalty, row, V,
                      NULL, 0);
        *id = sample_greedy(row, V);
        *accepted = has_draft && d->ids[i] == *id;
        return OK;
    }
    struct rng *r = sampler_rng(v->s);
    const struct gpu_row_summary *g = v->req && v->req->filled ? &v->req->rows[i] : NULL;
    /* an untruncated draft's probability comes from its summary (the bits of the full
     * distribution's p(t)): the distribution is built only if a draw needs it */
    int lazy =
        has_draft && g && g->n == 0 && untruncated(sp, V) && (v->req->penalised || !penalties(sp));
    const struct sample_dist *p = NULL;
    int rc;
    if (!has_draft && g && g->drawn >= 0) {
        /* the device drew this row at the u this rng gives now, unless a rejected draft
         * before it took another number */
        struct rng before = *r;
        if (rng_double(r) == v->req->u) {
            *id = g->drawn;
            return OK;
        }
        *r = before;
    }
    if (!lazy && (rc = row_dist(v, row, i, &p))) return unusable(rc);
    if (!has_draft) {
        *id = sample_dist_draw(p, r);
        return OK;
    }
    int32_t t = d->ids[i];
    const struct sample_dist *q = d->q ? d->q[i] : NULL;
    float pt = lazy ? sample_prob_untruncated(g->logit_t, g->max, g->total, sp->temperature)
                    : sample_dist_prob(p, t);
    if (sample_accept(r, pt, q ? sample_dist_prob(q, t) : 1.0f)) {
        *id = t;
        *accepted = 1;
        return OK;
    }
    if (lazy && (rc = row_dist(v, row, i, &p))) return unusable(rc);
    *id = q ? sample_residual(p, q, v->dense, r) : sample_residual_onehot(p, t, r);
    return OK;
}

/* greedy rounds from the rows' greedy tokens in v->ids */
static int decide_ids(struct verify *v, const struct draft *d, verify_commit_fn *cb, void *ctx,
                      int *n_accepted, int *stopped) {
    for (int i = 0; i <= d->n; i++) {
        int rc = sampler_accept(v->s, v->ids[i]);
        if (rc) return rc;
        int accepted = i < d->n && d->ids[i] == v->ids[i];
        *n_accepted += accepted;
        if (cb && cb(ctx, v->ids[i], NULL)) {
            *stopped = 1;
            break;
        }
        if (!accepted) break;
    }
    return OK;
}

int verify_decide(struct verify *v, const struct draft *d, verify_commit_fn *cb, void *ctx,
                  int *n_accepted, int *stopped) {
    int V = model_config(v->m)->vocab_size;
    int k = d->n < v->max_draft ? d->n : v->max_draft;
    struct draft dk = *d;
    dk.n = k;
    *n_accepted = 0;
    *stopped = 0;
    int rc = OK;
    if (v->greedy_ids) return decide_ids(v, &dk, cb, ctx, n_accepted, stopped);
    if (v->req && v->req->filled) v->n_summarised++;
    for (int i = 0; i <= k; i++) {
        float *row = v->logits + (size_t)i * V;
        if (v->top_logprobs >= 0) memcpy(v->raw, row, sizeof(float) * (size_t)V);
        int32_t id;
        int accepted;
        if ((rc = decide(v, row, &dk, i, &id, &accepted))) break;
        if ((rc = sampler_accept(v->s, id))) break;
        struct logprobs lp, *lpp = NULL;
        if (v->top_logprobs >= 0 && logprobs_compute(v->raw, V, id, v->top_logprobs, &lp) == OK)
            lpp = &lp;
        *n_accepted += accepted;
        if (cb && cb(ctx, id, lpp)) {
            *stopped = 1;
            break;
        }
        if (!accepted) break;
    }
    return rc;
}

/* The penalties' lists for a pass over in[0..n) (gpu.h's gpu_sample_req): the counts before
 * the pass, and for row r the ids among in[1..r] (the drafts that row r's decision counts as
 * committed) with their counts then. 0 when they cannot be made (out of memory). */
static int pen_lists(struct verify *v, const int32_t *in, int n) {
    const struct sample_params *sp = sampler_params(v->s);
    const struct penalty_counts *c = sampler_counts(v->s);
    float pr = sp->presence_penalty, fr = sp->frequency_penalty;
    if (c->n_seen > v->pen_cap) {
        int cap = c->n_seen * 2;
        int32_t *ids = realloc(v->pen_ids, sizeof(int32_t) * (size_t)cap);
        if (ids) v->pen_ids = ids;
        float *amt = realloc(v->pen_amt, sizeof(float) * (size_t)cap);
        if (amt) v->pen_amt = amt;
        if (!ids || !amt) return 0;
        v->pen_cap = cap;
    }
    for (int i = 0; i < c->n_seen; i++)
        v->pen_ids[i] = c->ids[i], v->pen_amt[i] = penalty_amount(pr, fr, c->counts[i]);
    int at = 0;
    for (int r = 0; r < n; r++) {
        v->ext_at[r] = at;
        for (int k = 1; k <= r; k++) {
            int first = 1, occ = 0;
            for (int j = 1; j < k && first; j++) first = in[j] != in[k];
            if (!first) continue;
            for (int j = k; j <= r; j++) occ += in[j] == in[k];
            v->ext_ids[at] = in[k];
            v->ext_amt[at++] = penalty_amount(pr, fr, penalty_count(c, in[k]) + occ);
        }
        v->ext_n[r] = at - v->ext_at[r];
    }
    struct gpu_sample_req *q = v->req;
    q->n_pen = c->n_seen, q->pen_ids = v->pen_ids, q->pen_amt = v->pen_amt;
    q->ext_at = v->ext_at, q->ext_n = v->ext_n, q->ext_ids = v->ext_ids, q->ext_amt = v->ext_amt;
    return 1;
}

struct model_batch_item verify_item(struct verify *v, const int32_t *in, int n) {
    int ids = v->greedy_ids;
    struct gpu_sample_req *req = v->req;
    const struct sample_params *sp = sampler_params(v->s);
    if (req) {
        req->filled = 0;
        /* with penalties, the device applies them, or the pass sends the logits */
        req->penalised = penalties(sp) && pen_lists(v, in, n);
        if (penalties(sp) && !req->penalised) req = NULL;
    }
    if (req) {
        /* Without truncation the device draws the last row at the number the rng will give
         * it when every draft before it is accepted (each acceptance takes one number). */
        req->draw = sp->temperature > 0 && untruncated(sp, model_config(v->m)->vocab_size);
        if (req->draw) {
            struct rng ahead = *sampler_rng(v->s);
            for (int i = 0; i < n - 1; i++) rng_next(&ahead);
            req->u = rng_double(&ahead);
        }
    }
    return (struct model_batch_item){
        v->kv, in, n, ids ? NULL : v->logits, v->taps, ids ? v->ids : NULL, 0, req};
}

int verify_round(struct verify *v, int32_t pending, const struct draft *d, verify_commit_fn *cb,
                 void *ctx, int *n_accepted, int *stopped) {
    static const struct draft none = {0};
    if (!d) d = &none;
    int k = d->n < v->max_draft ? d->n : v->max_draft;
    int32_t in[1 + VERIFY_MAX_DRAFT];
    if (k > VERIFY_MAX_DRAFT) k = VERIFY_MAX_DRAFT;
    in[0] = pending;
    if (k) memcpy(in + 1, d->ids, sizeof(int32_t) * (size_t)k);
    int base = kv_len(v->kv);
    struct draft dk = *d;
    dk.n = k;
    struct model_batch_item it = verify_item(v, in, k + 1);
    int rc = model_forward_batch(v->m, &it, 1);
    if (rc) {
        *n_accepted = *stopped = 0;
        return rc;
    }
    rc = verify_decide(v, &dk, cb, ctx, n_accepted, stopped);
    kv_truncate(v->kv, base + 1 + *n_accepted);
    return rc;
}
